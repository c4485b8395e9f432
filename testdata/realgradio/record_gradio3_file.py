"""Records one reverse_file call on a real Gradio 3.50.2 app (ws protocol):
POST /upload, the WebSocket frames of queue/join, GET /file=. Development
tool only (tests read its output from gradio/testdata, never a live server).

    python3 record_gradio3_file.py http://127.0.0.1:7875 > gradio/testdata/transcripts/gradio-3.50.2_reverse-file_ws.json
"""
import asyncio, json, sys, urllib.request, uuid

import websockets  # Debian's python3-websockets

BASE = sys.argv[1].rstrip("/")
PAYLOAD = b"hello file payload 123\n"


def upload():
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"payload.txt\"\r\n"
            "Content-Type: text/plain\r\n\r\n").encode() + PAYLOAD + f"\r\n--{boundary}--\r\n".encode()
    req = urllib.request.Request(BASE + "/upload", data=body, method="POST",
                                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(req) as r:
        return r.read().decode()


async def call(path):
    cfg = json.load(urllib.request.urlopen(BASE + "/config"))
    fn = next(i for i, d in enumerate(cfg["dependencies"]) if d["api_name"] == "reverse_file")
    frames = []
    session = "rec" + uuid.uuid4().hex[:8]
    data = [{"name": path, "orig_name": "payload.txt", "size": len(PAYLOAD), "data": None, "is_file": True}]
    async with websockets.connect(BASE.replace("http", "ws", 1) + "/queue/join") as ws:
        while True:
            m = await ws.recv()
            frames.append({"from": "server", "text": m})
            msg = json.loads(m)["msg"]
            if msg == "send_hash":
                out = json.dumps({"fn_index": fn, "session_hash": session})
            elif msg == "send_data":
                out = json.dumps({"data": data, "event_data": None, "fn_index": fn, "session_hash": session})
            elif msg == "process_completed":
                break
            else:
                continue
            await ws.send(out)
            frames.append({"from": "client", "text": out})
    return cfg, fn, frames


up = upload()
cfg, fn, frames = asyncio.run(call(json.loads(up)[0]))
result = json.loads(frames[-1]["text"])["output"]["data"][0]
dl = urllib.request.urlopen(BASE + "/file=" + result["name"])
print(json.dumps({
    "about": "real Gradio %s reverse_file over ws, recorded by testdata/realgradio/record_gradio3_file.py" % cfg["version"],
    "payload": PAYLOAD.decode(),
    "upload_response": up,
    "fn_index": fn,
    "frames": frames,
    "download": {"status": dl.status, "content_type": dl.headers.get("content-type"), "body": dl.read().decode("latin1")},
}, indent=1))
