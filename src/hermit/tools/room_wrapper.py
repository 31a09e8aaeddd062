"""The shell wrapper a room's command runs in, inside bubblewrap (room_sandbox.py starts it): it unpacks the room,
notes it, runs the command under `timeout`, kills what the command left, and packs the room back.

Its parts are here as text, with what the host reads back by (PACKED, LIST_DIGITS); room_sandbox.RoomSandbox.launch
passes WRAPPER to `/bin/sh -c`.
"""

from __future__ import annotations

from hermit.tools.os_sandbox import RUN_COMMAND
from hermit.tools.room_unpack import MAX_PATH_BYTES
from hermit.workspace import BOOTSTRAP_ORDER

# $1 the workspace (ROOM_ROOT)  $2 seconds  $3 the tasks its user namespace may hold ("": not set here); in the environment
# (not arguments: `ps` shows those to every user), HERMIT_CWD and the command (os_sandbox.RUN_COMMAND), both
# unset before it runs. The room comes in on stdin and goes back out on stderr (kept as fd 3, which the command
# does not get); the command's stdout and stderr are the wrapper's stdout. Everything the command leaves running
# is killed before the room is packed, so the packed room is what it finally wrote.
#
# Before the command, the wrapper notes every entry of the room as it came in (SNAPSHOT: inode, status-change time,
# path) and waits for the clock to pass the last of those times, so that anything the command does to an entry
# changes its line. After it, the pack (PACK) sends in a tar only the entries whose line changed or is new, then the
# paths of those whose line did not (NUL-separated), then that list's length (LIST_DIGITS digits): a room of 65,000
# files of which the command changed none hands back a list, not 65,000 tar headers for Hermit to read one by one.
# Anything that fails there (no room in /tmp, the clock set back, an entry the listing cannot see) packs the whole room,
# as before. The snapshot is the command's to spoil (it runs as the same uid): that loses only its own changes, as `rm`
# would; Hermit trusts the list no more than the tar (room_unpack.add_unchanged). The pack names the room's top entries
# itself rather than pass tar `--exclude`s: GNU tar checks every leading part of every path against each of them,
# which made a folder nested 500 deep take minutes to pack; names go to tar NUL-separated, never by `set -- "$@" "$f"`
# (which copies the list at each name: 20,000 empty files at the top took 21 s of CPU). The snapshot gets
# SNAPSHOT_SECONDS; the pack gets what is left of the command's time, at least PACK_SECONDS, and ends with PACKED only
# when it finished: Hermit keeps nothing of a pack that was cut short (the room's deletions are the entries missing
# from it).
PACK_SECONDS = 5
SNAPSHOT_SECONDS = 2  # a room of 65,000 entries is noted in ~0.1 s; past this it is packed whole
PACKED = b"\nhermit: the room is packed\n"
LIST_DIGITS = 20
_TOP = ("memory", "MEMORY.md", *BOOTSTRAP_ORDER)
_FIND = ("LC_ALL=C find . -mindepth 1 \\( " + " -o ".join(f"-path ./{n}" for n in _TOP)
         + ' \\) -prune -o -printf "%i %C@ %p\\0"')
# A path too long for tar to open by name (PATH_MAX) is never kept (MAX_PATH_BYTES), but the room is then packed
# whole, so that the chat is told (as tar recursing from the top reaches any depth); the tar's names are sorted, so
# that a folder comes before what is in it (the entry limit keeps the first ones: unpack).
# The snapshot may miss an entry (a listing that failed half-way): that entry is then sent whole, which costs only time.
# The pack's listing may not: an entry missing from both the tar and the list reads as deleted, so every stage that
# makes the list leaves a mark when it fails, and then the whole room is packed.
# tar stores a file's second name as a hard link to its first, which the unpack refuses (it trusts no link
# between entries: the name read as deleted); --hard-dereference stores every name as the file it is.
SNAPSHOT = _FIND + r""" | LC_ALL=C sort -z > "$1/before" && touch "$1/mark" || exit 1
i=0
while [ $i -lt 1000 ]; do
  touch "$1/tick" || exit 1
  [ -n "$(find "$1/tick" -newercc "$1/mark")" ] && exit 0
  i=$((i+1))
done
exit 1"""
_LISTED = (r"""{ """ + _FIND + r""" || : > "$S/failed"; } | { LC_ALL=C sort -z || : > "$S/failed"; } """
           r"""| { LC_ALL=C comm -z -COLUMNS "$S/before" - || : > "$S/failed"; } | cut -z -d" " -f3- """
           r"""| { LC_ALL=C sort -z || : > "$S/failed"; } > "$S/LIST" """
           r"""&& [ ! -e "$S/failed" ]""")
PACK = r"""S=$1
if [ -n "$S" ] && [ -f "$S/before" ] && touch "$S/now" && [ -z "$(find "$S/mark" -newercc "$S/now")" ] \
   && """ + _LISTED.replace("COLUMNS", "12").replace("LIST", "same") + r""" \
   && """ + _LISTED.replace("COLUMNS", "13").replace("LIST", "sent") + r""" \
   && ! LC_ALL=C grep -z -q -E "^.{""" + str(MAX_PATH_BYTES + 1) + r"""}" "$S/sent"; then
  tar -cf - --hard-dereference --null --no-recursion -T "$S/sent" && cat "$S/same" && printf "%0""" + str(LIST_DIGITS) + r"""d" "$(wc -c < "$S/same")"
else
  for f in ./* ./.[!.]* ./..?*; do
    case $f in """ + "|".join(f"./{n}" for n in _TOP) + r""") continue ;; esac
    if [ -e "$f" ] || [ -h "$f" ]; then printf "%s\0" "$f"; fi
  done | tar -cf - --hard-dereference --null -T - && printf "%0""" + str(LIST_DIGITS) + r"""d" 0
fi"""
WRAPPER = r"""
exec 3>&2 2>/dev/null
cd "$1" && tar -xf - --no-same-owner || { echo "hermit: the sandbox could not be prepared"; exit 125; }
exec 0</dev/null
S=$(mktemp -d /tmp/.hermit-room-XXXXXX) && timeout -k 1 """ + str(SNAPSHOT_SECONDS) + r""" /bin/sh -c '""" + SNAPSHOT + r"""' hermit-snapshot "$S" || S=""
if [ -n "$3" ]; then
  ulimit -u "$3" || ulimit -p "$3" || { echo "hermit: the sandbox could not limit its tasks"; exit 125; }
fi
cd "$HERMIT_CWD" || cd "$1"
unset HERMIT_CWD
start=$(date +%s)
timeout -k 2 "$2" /bin/sh -c '""" + RUN_COMMAND + r"""' 2>&1 3>&-
rc=$?
kill -KILL -1
now=$(date +%s)
left=$(( $2 - ${now:-0} + ${start:-0} ))
[ "$left" -ge """ + str(PACK_SECONDS) + r""" ] || left=""" + str(PACK_SECONDS) + r"""
cd "$1" || exit $rc
if timeout -k 1 "$left" /bin/sh -c '""" + PACK + r"""' hermit-pack "$S" >&3; then
  printf '""" + PACKED.decode().replace("\n", "\\n") + r"""' >&3
else
  echo "hermit: the room could not be handed back within the command's time"
fi
exit $rc
"""
