# The current-ClickHouse runner of Canon's tests (internal/testenv/chdb.go):
# chdb embeds a current ClickHouse in this process. It reads one JSON
# request a line on stdin, {"q": SQL, "fmt": output format}, runs it in a
# session whose data lives in the directory given as the first argument,
# and writes one JSON answer a line on file descriptor 3, {"out": text} or
# {"err": message}: ClickHouse may log on stdout and stderr.
import json
import os
import sys

from chdb import session

out = os.fdopen(3, "w")
s = session.Session(sys.argv[1])
out.write(json.dumps({"version": s.query("SELECT version()", "TSVRaw").bytes().decode().strip()}) + "\n")
out.flush()
for line in sys.stdin:
    req = json.loads(line)
    try:
        r = s.query(req["q"], req.get("fmt") or "JSONCompactEachRow")
        ans = {"out": r.bytes().decode() if r is not None else ""}
    except Exception as e:  # every ClickHouse error is the answer, not the end
        ans = {"err": str(e)}
    out.write(json.dumps(ans) + "\n")
    out.flush()
