#!/usr/bin/env python3
"""Extracts the wire shapes of the real Gradio 5.49.1 / @gradio/client 2.7.0
captures into gradio-5.49.1_jsclient-2.7.0.json (the expectations of
conformance_test.go and conformance.mjs). Not run by the tests, which read
only the JSON; rerun it when new captures replace the old ones:

    python3 extract.py TRANSCRIPT_DIR > gradio-5.49.1_jsclient-2.7.0.json

TRANSCRIPT_DIR holds gradio-5.49.1_jsclient-2.7.0_connect-predict-generator.txt
and gradio-5.49.1_jsclient-2.7.0_all-endpoints.txt (raw logging-proxy dumps).
"""
import json, re, sys
def parse(path):
    ex = []; cur = None; mode = None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        m = re.match(r"=== \[#(\d+)\] \+\s*\d+ms REQUEST (\S+) (\S+) HTTP/1.1", line)
        if m:
            cur = {"n": int(m[1]), "method": m[2], "target": m[3], "req_headers": {}, "res_headers": {}, "sse": [], "req_body": None, "res_body": None}
            ex.append(cur); mode = "reqh"; continue
        m = re.match(r"=== \[#(\d+)\] \+\s*\d+ms RESPONSE (\d+)", line)
        if m:
            cur["status"] = int(m[2]); mode = "resh"; continue
        if line.startswith("--- body"):
            mode = "reqb"; continue
        if re.match(r"--- \[#\d+\] .*response body", line):
            mode = "resb"; continue
        if re.match(r"--- \[#\d+\] .*stream chunk", line):
            mode = "sse"; continue
        if re.match(r"--- \[#\d+\] .*stream end", line):
            mode = None; continue
        if cur is None: continue
        if mode in ("reqh", "resh") and line.startswith("  ") and ": " in line:
            k, v = line.strip().split(": ", 1)
            cur["req_headers" if mode == "reqh" else "res_headers"][k.lower()] = v
        elif mode == "reqb" and line:
            cur["req_body"] = (cur["req_body"] + "\n" if cur["req_body"] else "") + line
        elif mode == "resb" and line:
            cur["res_body"] = (cur["res_body"] + "\n" if cur["res_body"] else "") + line
        elif mode == "sse" and line.startswith("  | data: "):
            cur["sse"].append(line[len("  | data: "):])
    return ex

if len(sys.argv) != 2:
    sys.exit(__doc__)
T = sys.argv[1].rstrip("/") + "/"
a = parse(T + "gradio-5.49.1_jsclient-2.7.0_connect-predict-generator.txt")
b = parse(T + "gradio-5.49.1_jsclient-2.7.0_all-endpoints.txt")
cfg = json.loads(a[0]["res_body"])
info = json.loads(a[1]["res_body"])

def template(ex, session):
    t = ex["target"].replace(session, "{session}")
    t = re.sub(r"file=/tmp/gradio/[0-9a-f]{64}/.*", "file={path}", t)
    return ex["method"] + " " + t

def calls(exs):
    """Group queue calls: each join followed by its data stream."""
    out = []; pending_upload = None
    session = re.search(r"heartbeat/(\w+)", " ".join(e["target"] for e in exs))[1]
    fns = {d["id"]: d["api_name"] for d in cfg["dependencies"]}
    for i, e in enumerate(exs):
        if e["target"].endswith("/queue/join"):
            body = json.loads(e["req_body"])
            data = exs[i + 1]
            assert "queue/data" in data["target"]
            msgs = [json.loads(s) for s in data["sse"]]
            out.append({"api_name": fns[body["fn_index"]], "request": body | {"session_hash": "{session}"},
                        "join_response": json.loads(e["res_body"]),
                        "messages": msgs})
    return out, session

ca, sa = calls(a); cb, sb = calls(b)
hdr_keep = ["content-type", "accept", "x-gradio-user", "content-disposition", "accept-ranges", "transfer-encoding"]
def wire(exs, session):
    w = []
    for e in exs:
        w.append({"request": template(e, session),
                  "req_headers": {k: v for k, v in e["req_headers"].items() if k in hdr_keep and not v.startswith("multipart/")} | ({"content-type": "multipart/form-data"} if e["req_headers"].get("content-type","").startswith("multipart/") else {}),
                  "status": e.get("status"),
                  "res_headers": {k: v for k, v in e["res_headers"].items() if k in hdr_keep}})
    return w

upload = [e for e in b if e["target"].endswith("/upload")][0]
download = [e for e in b if "file=" in e["target"]][0]
out = {
  "about": "Shapes copied from real captures of Gradio 5.49.1 <-> @gradio/client 2.7.0 (Node 20) taken by a logging reverse proxy (transcripts gradio-5.49.1_jsclient-2.7.0_connect-predict-generator.txt and _all-endpoints.txt). Used by conformance_test.go and testdata/jsclient/conformance.mjs; never read from outside the repo at test time.",
  "gradio_version": cfg["version"],
  "js_client_version": "2.7.0",
  "config": {k: v for k, v in cfg.items() if k not in ("components", "dependencies", "layout", "page", "app_id")},
  "config_keys": list(cfg.keys()),
  "dependency_keys": list(cfg["dependencies"][0].keys()),
  "component_keys": list(cfg["components"][1].keys()),
  "layout_component_keys": list(cfg["components"][0].keys()),
  "dependencies": [{k: d[k] for k in ("id", "api_name", "inputs", "outputs", "backend_fn", "queue", "types", "show_api", "connection")} for d in cfg["dependencies"]],
  "components": [{"id": c["id"], "type": c["type"], "skip_api": c["skip_api"]} for c in cfg["components"]],
  "config_components": cfg["components"],
  "config_dependencies": cfg["dependencies"],
  "config_layout": cfg["layout"],
  "info": info,
  "view_api_lines": [
    "/upper(text: str [Textbox]) -> [str]",
    "/count(n: float [Number]) -> [str]",
    "/slow(seconds: float [Number]) -> [str]",
    "/counter(text: str [Textbox], undefined: undefined [state]) -> [str]",
    "/fail(text: str [Textbox]) -> [str]",
    "/reverse_file(f: filepath [File]) -> [filepath]"],
  "wire_connect_predict_generator": wire(a, sa),
  "wire_all_endpoints": wire(b, sb),
  "calls_connect_predict_generator": ca,
  "calls_all_endpoints": cb,
  "upload": {"request_part": {"name": "files", "filename": "blob"}, "response": json.loads(upload["res_body"])},
  "download": {"status": download["status"], "headers": {k: v for k, v in download["res_headers"].items() if k in hdr_keep}},
}
json.dump(out, sys.stdout, indent=1)
