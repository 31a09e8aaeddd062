"""The seeded synthetic memory workspace of memory_bench.py: vocabulary, EN/ZH line templates and queries,
daily logs + MEMORY.md, written until the default chunking reaches a target chunk count.

Everything depends only on the seed (a day's log only on (seed, day)), so runs are reproducible and a
smaller workspace is the newest part of a larger one. Also used by after_write.py, index_ab.py,
pg_bench_*.py and retrieval/ab_latency.py (through memory_bench).
"""

from __future__ import annotations

import datetime as dt
import random
import shutil
import string
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hermit.config.schema import MemorySearchConfig
from hermit.memory.index.chunking import chunk_markdown

SEED = 20260630
ANCHOR = dt.date(2026, 6, 30)  # the newest daily log; older days go backwards from here
GENERATOR_VERSION = 2

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
