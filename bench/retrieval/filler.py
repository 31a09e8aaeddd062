"""Template filler for the daily logs: routine notes that carry no benchmark answer.

Each builder returns ``(heading, lines)`` for one section. All randomness comes from the
``random.Random`` passed in, so output is deterministic for a given seed and call order.
Filler must never contain a planted fact's key string; ``generate.py`` checks that.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass

Block = tuple[str, list[str]]

EN_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ZH_WEEKDAYS = ("星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期日")

TRIP_START = dt.date(2026, 9, 14)
TRIP_END = dt.date(2026, 9, 24)


class Decks:
    """Deals pool items like cards, so one-off events don't repeat every other day."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.decks: dict[tuple[str, ...], list[str]] = {}

    def draw(self, pool: tuple[str, ...], k: int) -> list[str]:
        deck = self.decks.setdefault(pool, [])
        out: list[str] = []
        k = min(k, len(pool))
        while len(out) < k:
            if not deck:
                fresh = list(pool)
                self.rng.shuffle(fresh)
                deck.extend(fresh)
            item = deck.pop()
            if item not in out:
                out.append(item)
        return out


@dataclass
class Ctx:
    date: dt.date
    rng: random.Random
    decks: Decks

    @property
    def weekend(self) -> bool:
        return self.date.weekday() >= 5

    @property
    def in_china(self) -> bool:
        return TRIP_START <= self.date < TRIP_END

    def team(self) -> list[str]:
        names = ["Marcus", "Elena", "Tomás", "Aisha"]
        if self.date >= dt.date(2026, 6, 3):
            names.append("Jon")
        if self.date >= dt.date(2026, 10, 19):
            names.append("Ravi")
        return names

    def sh_team(self) -> list[str]:
        names = ["王磊", "张敏"]
        if self.date < dt.date(2026, 9, 7):
            names.append("李静")
        if self.date <= dt.date(2026, 10, 9):
            names.append("刘洋")
        if self.date >= dt.date(2026, 10, 12):
            names.append("赵婷")
        return names


# ----------------------------------------------------------------------------- English pools

STANDUP_TASKS = (
    "finishing the pagination refactor in carrier-api",
    "writing integration tests for the rate-card importer",
    "cleaning up stale feature flags in the tracking UI",
    "on support rotation, mostly customer questions about ETAs",
    "upgrading the tracking UI to Node 22",
    "pairing with {other} on the flaky checkout tests",
    "profiling the label-printing endpoint, it allocates far too much",
    "reviewing the Terraform module for the new VPC peering",
    "moving the last CI jobs from Jenkins to GitHub Actions",
    "fixing timezone handling in the delivery-window picker",
    "adding OpenTelemetry spans to the quote service",
    "triaging Sentry errors from the driver app",
    "rewriting the CSV export so it streams instead of buffering",
    "load-testing the address-validation service",
    "writing the runbook for carrier onboarding",
    "chasing a memory leak in the PDF invoice renderer",
    "updating the on-call handbook",
    "cleaning up IAM roles nobody uses anymore",
    "building the carrier scorecard queries",
    "investigating slow cold starts in the geocoding lambda",
    "wiring the new design tokens into the web app",
    "interviewing for the backend role",
    "bumping Django to 5.1 in the admin service",
    "splitting the settings module in carrier-api",
    "adding contract tests between the quote service and carrier-api",
    "fixing the broken staging seed data",
    "documenting the shipment status state machine",
    "replacing moment.js with date-fns in the ops console",
    "tuning the HPA for the tracking API",
    "writing a migration guide for the v1 tracking endpoints",
)
STANDUP_STATUS = (
    "; should be done today",
    "; blocked on review",
    "; about halfway",
    "",
    "; wants a second pair of eyes on the approach",
    "; merged, watching it in staging",
    "; slower than expected",
    "",
)

PR_TITLES = (
    "Add retry jitter to the geocoder client",
    "Remove legacy v1 tracking endpoints",
    "Cache carrier rate cards for 10 minutes",
    "Fix N+1 query in the shipment list view",
    "Bump axios to 1.7",
    "Add dark mode toggle to the ops console",
    "Paginate /v2/carriers",
    "Validate postal codes server-side",
    "Move cron jobs into the scheduler service",
    "Structured logging for the quote service",
    "Drop the unused customs_docs table",
    "Add request IDs to outbound carrier calls",
    "Make the label renderer timeout configurable",
    "Type hints for the pricing module",
    "Extract the address normalizer into a library",
    "Replace hand-rolled retry loop with tenacity",
    "Add healthcheck endpoint to the geocoder",
    "Shorten the ops console session timeout",
)
DEPLOY_OUTCOMES = (
    "; no alerts",
    "; canary looked clean",
    "; one retry on the migration job, then fine",
    "; error rate flat",
    ", after a 20-minute wait for CI",
    "; rolled back once for a config typo, redeployed",
)
PR_VERDICTS = (
    "approved",
    "approved with nits",
    "requested changes — missing tests",
    "left a question about error handling",
    "asked to split it into two PRs",
    "approved; suggested a follow-up ticket for the docs",
)

MEETINGS = (
    "Hiring sync: {n} onsite loops next week for the backend role.",
    "Design review for the driver app offline mode — agreed to prototype first.",
    "Product sync with Aisha: carrier scorecards slip one sprint.",
    "Architecture office hours: nobody showed up, used the slot to write.",
    "Customer call with {carrier} about delivery ETAs; they want webhooks for delays.",
    "Sprint planning: {n}0 points committed, two carry-overs.",
    "Retro: too many meetings on Wednesdays; trying a no-meeting afternoon.",
    "Cloud spend review with Nadia: flat month-over-month, staging is the outlier.",
    "Skip-level with Owen: he asked what slows the team down; said code review latency.",
    "Guild meeting on Python packaging; uv is winning.",
    "Incident review of last week's pages — nothing actionable beyond alert tuning.",
    "Vendor demo of a feature-flag service; not convinced, ours is fine.",
    "Roadmap review: Q4 themes are reliability and carrier self-serve.",
    "Quick sync with {person} about the on-call handoff notes.",
    "Coffee chat with a new hire from the mobile team; answered questions about the platform.",
    "Demo day: {person} showed the new ops console search; people loved it.",
    "Interview debrief: strong hire on the systems design loop, mixed on coding.",
    "Pairing session with {person} on the Helm chart cleanup.",
    "Planning poker ran long; we need smaller tickets.",
    "Security office hours: questions about the new secrets scanning in CI.",
)
CARRIERS = ("Cascade Couriers", "Blue Heron Logistics", "Pinecrest Transport", "Redline Express",
            "Summit Parcel", "Willamette Freightways")

TODOS = (
    "renew the car registration",
    "book Maya's annual checkup",
    "order printer ink",
    "reply to the school about the field trip form",
    "cancel the unused streaming subscription",
    "send the expense report",
    "update the team wiki onboarding page",
    "schedule a haircut",
    "back up the family photos to the NAS",
    "return the library books",
    "fix the squeaky back door",
    "call the bank about the wire fee",
    "write peer feedback for {person}",
    "clean up the Downloads folder",
    "book a babysitter for Saturday night",
    "buy a birthday card for Mom",
    "refill Mochi's prescription food",
    "read {person}'s design doc",
    "file the quarterly security training",
    "order new running shoes",
    "donate the old baby clothes",
    "reply to the HOA email about the fence",
    "sign Maya's reading log",
    "update the emergency contact at school",
)

DINNERS = ("veggie tacos", "mushroom risotto", "sheet-pan gnocchi", "lentil soup", "pad see ew takeout",
           "grilled salmon and rice", "homemade pizza", "dumplings from the freezer",
           "tomato egg stir-fry", "mapo tofu", "black bean burgers", "leftover curry",
           "miso soup and onigiri", "pasta with pesto")
MAYA_EVENTS = (
    "Maya lost another tooth; the tooth fairy rate is apparently $2 now.",
    "Maya finished another Wings of Fire book and started the next one.",
    "Maya had a playdate with Nora from her class.",
    "Maya's swim lesson: she can do backstroke across the pool now.",
    "Maya built a cardboard marble run that took over the living room.",
    "Maya asked why the sky is blue for the fourth time this week.",
    "Maya practiced piano without being asked. Noting it for posterity.",
    "Maya wants a hamster; told her to write a proposal.",
    "Maya drew a comic about Mochi fighting a vacuum cleaner.",
    "Maya helped Wei fix her bike's chain.",
    "Maya read a chapter aloud to Mochi, who was not impressed.",
    "Maya's class is doing a unit on salmon; she explained the whole life cycle at dinner.",
    "Maya and Nora set up a lemonade stand; made $11, spent $6 on stickers.",
    "Maya had a meltdown about socks. Resolved with a snack.",
    "Maya learned to tie a bowline at the library's knot workshop.",
    "Maya asked if she can walk to school alone next year. Maybe.",
    "Maya's teacher sent a note: great job helping a new classmate.",
    "Maya made slime with Wei; the kitchen table will never be the same.",
    "Maya beat Wei at Connect Four three times in a row.",
    "Maya wants to do the library summer reading challenge again.",
)
ERRANDS = (
    "Picked up the dry cleaning.",
    "Farmers market at PSU: peaches, corn and a bunch of dahlias.",
    "Dropped off donations at Goodwill.",
    "Got both bikes tuned at the shop on Division.",
    "Costco run; forgot the paper towels again.",
    "Returned the Amazon box that's been in the hallway for two weeks.",
    "Hardware store for picture hooks and a new shower head.",
    "Took Mochi to the vet for the annual shots.",
    "Picked up the photo prints for Wei's parents.",
    "Dropped the rug off at the cleaner's on Hawthorne.",
    "Library run: returned four books, took out five.",
    "New wiper blades for the Outback.",
    "Bought a birthday present for Maya's friend's party on Saturday.",
    "Post office: mailed the documents to the accountant.",
)
ROUTES = ("the Eastbank Esplanade", "the Springwater Corridor", "the Laurelhurst Park loop",
          "the waterfront loop", "Mt. Tabor", "the Sellwood riverfront")
BOOKS = ("Designing Data-Intensive Applications", "Project Hail Mary", "Thinking in Systems",
         "Tomorrow, and Tomorrow, and Tomorrow", "The Manager's Path", "Braiding Sweetgrass",
         "A Philosophy of Software Design", "The Overstory")
IDEAS = (
    "Idea: a weekly digest of delivery stats for the carriers.",
    "Idea: an allowance jar system for Maya (spend / save / give).",
    "Noticed the staging cluster costs more than prod on weekends — look into scaling it down.",
    "Podcast worth keeping: an episode on cell-based architecture.",
    "Thought: our incident template asks for too much before the fire is out.",
    "Idea: pair new hires with an on-call buddy for their first rotation.",
    "Should write down how the carrier-api retry budget works; only Marcus knows.",
    "Want to try batching Monday's admin into one 45-minute block.",
    "Read a good post on write-ahead logging internals; send it to Jon.",
    "Consider moving the ops console to server-side rendering; Elena is curious too.",
    "Our alert names are inconsistent; propose a naming scheme at the next SRE sync.",
    "Try writing the weekly update on Friday morning instead of Monday.",
    "Idea: a tiny CLI that opens the right Grafana dashboard for a service name.",
    "Noticed three teams have their own retry helpers; a shared library would help.",
    "Remember to block travel days in the shared calendar earlier.",
    "The carrier onboarding doc is out of date again; ask Aisha who owns it.",
    "Started keeping a brag document for the promo conversation.",
    "Idea: 'office hours' for the data model questions so they stop coming in DMs.",
)


# ----------------------------------------------------------------------------- Chinese pools

ZH_TASKS = (
    "在改 dbt 模型的增量逻辑",
    "在排查 Airflow 调度延迟的问题",
    "在把看板从 Redshift 搬到新集群",
    "写数据质量检查的规则",
    "跟财务对上个月的运费报表",
    "优化宽表的分区方式",
    "整理数据字典",
    "给新来的实习生做培训",
    "修复时区导致的日报偏差",
    "评估 Superset 的权限管理",
    "处理业务方的几个取数需求",
    "测试物化视图的写入性能",
    "梳理上游 Kafka Connect 的数据源",
    "补单元测试",
)
ZH_STATUS = ("，预计周五完成", "，还在进行中", "，已经提测", "，需要我帮忙看一下方案", "", "，比预期慢一点")
ZH_DINNERS = ("西红柿炒鸡蛋和紫菜汤", "冷冻饺子", "陈伟做的可乐鸡翅", "麻婆豆腐", "炸酱面", "清蒸鱼",
              "酸菜鱼外卖", "葱油拌面", "番茄牛腩", "韭菜盒子", "皮蛋瘦肉粥")
ZH_MAYA = (
    "Maya 学会了跳绳，连跳五十个。",
    "Maya 今天练了半小时毛笔字，写得比上周工整。",
    "Maya 在看中文版的《小猪佩奇》，跟着学了好几句。",
    "Maya 问我为什么月亮会跟着车走。",
    "Maya 和陈伟去图书馆借了三本绘本。",
    "Maya 用中文给奶奶写了一张明信片。",
    "Maya 今天自己整理了书包，值得表扬。",
    "Maya 说长大想当兽医，因为 Mochi。",
    "Maya 在学校交了一个新朋友，叫 Ava。",
    "Maya 背了一首《春晓》给陈伟听。",
    "Maya 跟我学包饺子，包了十几个，形状都很有创意。",
    "Maya 今天不肯练琴，讲了半天道理才去。",
    "Maya 把零花钱存起来，说要给奶奶买礼物。",
    "Maya 画了一张全家福，Mochi 比人还大。",
    "Maya 第一次自己用筷子夹起了花生米。",
)
ZH_CALL_TOPICS = (
    "杭州最近热得厉害，白天三十七八度。",
    "小区里的桂花快开了。",
    "婆婆在学用抖音，发了好几个视频给我们看。",
    "问 Maya 中文学得怎么样，让她背了一首诗。",
    "表姐家的孩子考上了浙大。",
    "婆婆让我们少吃冰的。",
    "公公最近每天早上去西湖边散步。",
    "聊了聊 Maya 的学校和钢琴。",
    "婆婆说楼下新开了一家菜市场，东西很新鲜。",
    "公公在学下围棋，每天在手机上下两盘。",
    "婆婆问陈伟工作忙不忙，让他注意身体。",
    "说起杭州地铁又通了一条新线。",
)
ZH_TODOS = ("给 Maya 买新的练习本", "续交中文学校的学费", "去银行换点人民币", "给婆婆寄维生素",
            "整理报销单", "约下个月的理发", "给 Mochi 买猫砂", "回复中文学校家长群的通知",
            "买 Maya 的秋季校服", "把照片备份到 NAS")
ZH_NOTES = (
    "想给团队写一份 ClickHouse 使用规范。",
    "最近睡得不太好，晚上少看手机。",
    "发现 Division 街上有一家不错的面包店。",
    "要记得多跟上海同事说谢谢，他们经常加班配合我们的时间。",
    "周末想带 Maya 去 Lan Su 中国园。",
    "把中文输入法换成了 Rime，还在适应。",
    "最近开会太多，下周试试每天留两个小时不开会。",
    "陈伟说想重新粉刷 Maya 的房间，她想要浅紫色。",
    "在 H Mart 买到了新鲜的毛豆和年糕。",
    "看了一部纪录片《舌尖上的中国》，Maya 也跟着看了一集。",
    "想报一个周末的书法班，和 Maya 一起学。",
    "给自己定个小目标：每周至少读一篇中文长文章。",
)
ZH_TRAVEL = (
    "早上在酒店附近跑了五公里，外滩人还不多。",
    "Maya 倒时差，下午睡了三个小时。",
    "去河坊街逛了逛，给 Maya 买了一个糖人。",
    "婆婆做了一桌子菜，吃撑了。",
    "陪公公去西湖边散步，他走得比以前慢一点。",
    "下雨，在家陪婆婆包馄饨。",
    "晚上和陈伟的高中同学吃饭。",
    "在地铁上差点坐过站，上海地铁比几年前又多了好几条线。",
    "买了两斤龙井，准备带回去送同事。",
)


def _pick(rng: random.Random, pool: tuple[str, ...], k: int) -> list[str]:
    return rng.sample(pool, min(k, len(pool)))


def _fmt(text: str, ctx: Ctx, person: str | None = None) -> str:
    rng = ctx.rng
    team = ctx.team()
    return text.format(
        other=rng.choice([p for p in team if p != person] or team),
        person=rng.choice(team),
        n=rng.randint(2, 5),
        carrier=rng.choice(CARRIERS),
    )


# ----------------------------------------------------------------------------- English blocks


def en_standup(ctx: Ctx) -> Block:
    rng = ctx.rng
    people = rng.sample(ctx.team(), min(len(ctx.team()), rng.randint(3, 5)))
    lines = []
    for person in people:
        task = _fmt(rng.choice(STANDUP_TASKS), ctx, person)
        lines.append(f"- {person}: {task}{rng.choice(STANDUP_STATUS)}.")
    lines.append(f"- Me: {rng.choice(STANDUP_TASKS).format(other=rng.choice(ctx.team()))}.")
    return "## Standup", lines


def en_reviews(ctx: Ctx) -> Block:
    rng = ctx.rng
    lines = []
    for title in _pick(rng, PR_TITLES, rng.randint(2, 4)):
        lines.append(f"- PR #{rng.randint(3100, 3999)} \"{title}\" ({rng.choice(ctx.team())}) — {rng.choice(PR_VERDICTS)}.")
    return "## Code review", lines


def en_meetings(ctx: Ctx) -> Block:
    rng = ctx.rng
    return "## Meetings", [f"- {_fmt(m, ctx)}" for m in ctx.decks.draw(MEETINGS, rng.randint(2, 4))]


def en_todo(ctx: Ctx) -> Block:
    rng = ctx.rng
    lines = []
    for todo in _pick(rng, TODOS, rng.randint(3, 6)):
        box = "[x]" if rng.random() < 0.4 else "[ ]"
        lines.append(f"- {box} {_fmt(todo, ctx)}")
    if rng.random() < 0.3:
        lines.append(f"- [ ] follow up on TICKET-{rng.randint(5100, 5999)} with {rng.choice(ctx.team())}")
    return "## Todo", lines


def en_home(ctx: Ctx) -> Block:
    rng = ctx.rng
    lines = [f"- Dinner: {rng.choice(DINNERS)}."]
    lines += [f"- {e}" for e in ctx.decks.draw(MAYA_EVENTS, rng.randint(1, 2))]
    if rng.random() < 0.6:
        lines += [f"- {e}" for e in ctx.decks.draw(ERRANDS, 1)]
    return "## Home", lines


def en_run(ctx: Ctx) -> Block:
    rng = ctx.rng
    km = rng.choice((4, 5, 5.5, 6, 6.5, 7, 8))
    pace = f"{rng.randint(5, 6)}:{rng.randint(0, 59):02d}"
    lines = [f"- Easy run, {km} km along {rng.choice(ROUTES)}; average pace {pace}/km."]
    lines.append(f"- Slept {rng.choice(('6', '6.5', '7', '7.5', '8'))} hours; energy {rng.choice(('good', 'okay', 'low', 'fine'))}.")
    return "## Run", lines


def en_reading(ctx: Ctx) -> Block:
    # One book every two weeks, in order, so progress notes stay consistent over time.
    days = (ctx.date - dt.date(2026, 6, 1)).days
    book = BOOKS[(days // 14) % len(BOOKS)]
    stage = ("started", "a few chapters in", "about a third in", "halfway", "past halfway",
             "nearly done", "finished")[(days % 14) // 2]
    return "## Reading", [f"- {book}: {stage}."]


def en_notes(ctx: Ctx) -> Block:
    rng = ctx.rng
    return "## Notes", [f"- {i}" for i in ctx.decks.draw(IDEAS, rng.randint(1, 3))]


def en_deploys(ctx: Ctx) -> Block:
    rng = ctx.rng
    services = ("carrier-api", "tracking-ui", "quote-service", "geocoder", "ops-console", "label-renderer")
    lines = []
    for svc in _pick(rng, services, rng.randint(1, 3)):
        sha = "".join(rng.choice("0123456789abcdef") for _ in range(7))
        outcome = rng.choice(DEPLOY_OUTCOMES)
        lines.append(f"- {svc} {sha} to prod by {rng.choice(ctx.team())}{outcome}.")
    return "## Deploys", lines


# ----------------------------------------------------------------------------- Chinese blocks


def zh_sh_meeting(ctx: Ctx) -> Block:
    rng = ctx.rng
    people = ctx.sh_team()
    lines = []
    for person in rng.sample(people, min(len(people), rng.randint(2, 4))):
        lines.append(f"- {person}：{rng.choice(ZH_TASKS)}{rng.choice(ZH_STATUS)}。")
    return "## 上海团队同步", lines


def zh_home(ctx: Ctx) -> Block:
    rng = ctx.rng
    lines = [f"- 晚饭：{rng.choice(ZH_DINNERS)}。"]
    lines += [f"- {e}" for e in ctx.decks.draw(ZH_MAYA, rng.randint(1, 2))]
    return "## 家里", lines


def zh_call(ctx: Ctx) -> Block:
    rng = ctx.rng
    return "## 跟婆婆视频", [f"- {t}" for t in ctx.decks.draw(ZH_CALL_TOPICS, rng.randint(1, 3))]


def zh_todo(ctx: Ctx) -> Block:
    rng = ctx.rng
    lines = []
    for todo in _pick(rng, ZH_TODOS, rng.randint(2, 4)):
        box = "[x]" if rng.random() < 0.4 else "[ ]"
        lines.append(f"- {box} {todo}")
    return "## 待办", lines


def zh_notes(ctx: Ctx) -> Block:
    rng = ctx.rng
    return "## 随手记", [f"- {n}" for n in ctx.decks.draw(ZH_NOTES, rng.randint(1, 2))]


def zh_run(ctx: Ctx) -> Block:
    rng = ctx.rng
    km = rng.choice((4, 5, 6, 7))
    return "## 运动", [f"- 跑了 {km} 公里，配速 {rng.randint(5, 6)}分{rng.randint(0, 59):02d}秒。"]


def zh_travel(ctx: Ctx) -> Block:
    rng = ctx.rng
    return "## 行程", [f"- {t}" for t in ctx.decks.draw(ZH_TRAVEL, rng.randint(2, 3))]


Builder = Callable[[Ctx], Block]

EN_WORKDAY: tuple[Builder, ...] = (en_standup, en_reviews, en_meetings, en_todo, en_home, en_notes,
                                   en_deploys, en_run, en_reading)
EN_WEEKEND: tuple[Builder, ...] = (en_home, en_run, en_todo, en_reading, en_notes)
ZH_WORKDAY: tuple[Builder, ...] = (zh_sh_meeting, zh_home, zh_todo, zh_notes, zh_run, zh_call)
ZH_WEEKEND: tuple[Builder, ...] = (zh_home, zh_call, zh_todo, zh_notes, zh_run)
ZH_TRIP: tuple[Builder, ...] = (zh_travel, zh_home, zh_notes, zh_run)


# Daily logs read roughly chronologically: morning work first, evening at home last.
ORDER = ("## Standup", "## 上海团队同步", "## Meetings", "## Code review", "## Deploys", "## Notes",
         "## 随手记", "## Todo", "## 待办", "## 行程", "## Run", "## 运动", "## Home", "## 家里",
         "## 跟婆婆视频", "## Reading")


def rank(heading: str) -> int:
    return ORDER.index(heading) if heading in ORDER else len(ORDER)


def builders(ctx: Ctx, lang: str) -> list[Builder]:
    """Section builders for one day, in a random order (each used at most once per day)."""
    if ctx.in_china:
        pool = list(ZH_TRIP)
    elif lang == "zh":
        pool = list(ZH_WEEKEND if ctx.weekend else ZH_WORKDAY)
    else:
        pool = list(EN_WEEKEND if ctx.weekend else EN_WORKDAY)
    ctx.rng.shuffle(pool)
    # An English day sometimes carries a Chinese section (a call with Wei's parents).
    if lang == "en" and not ctx.in_china and ctx.rng.random() < 0.1:
        pool.insert(ctx.rng.randint(0, len(pool)), zh_call)
    return pool


def header(date: dt.date, lang: str) -> str:
    if lang == "zh":
        return f"# {date.isoformat()} {ZH_WEEKDAYS[date.weekday()]}"
    return f"# {date.isoformat()} ({EN_WEEKDAYS[date.weekday()]})"
