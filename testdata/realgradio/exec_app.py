"""An execution log for the queued-takeback experiments (docs/notes-queued-takeback.md).

One endpoint, slow(seconds), with Gradio's default one-call-at-a-time
(concurrency_limit=1; Gradio 3: demo.queue() with concurrency_count=1), that
prints "EXEC <unix time> START <seconds>" when it starts and "... END ..."
when it returns, so whether a call ever ran is read from the server's log
(testdata/realgradio/start.sh writes it to $ROOT/logs/exec_app-PORT.log).
Each experiment gives its calls distinct durations to tell them apart.

    ROOT=/tmp/realgradio bash testdata/realgradio/start.sh exec_app.py 4.20.1 7903
"""
import sys
import time

import gradio as gr

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 7860


def slow(seconds):
    s = float(seconds)
    print(f"EXEC {time.time():.3f} START {s}", flush=True)
    time.sleep(s)
    print(f"EXEC {time.time():.3f} END {s}", flush=True)
    return f"slept {s:.3f}s"


with gr.Blocks(analytics_enabled=False) as demo:
    i = gr.Number(value=1, label="seconds")
    o = gr.Textbox(label="result")
    gr.Button("slow").click(slow, i, o, api_name="slow")

if int(gr.__version__.split(".")[0]) < 4:
    demo.queue()  # Gradio 3: the queue (over WebSocket) is off unless asked for

if __name__ == "__main__":
    demo.launch(server_name="127.0.0.1", server_port=PORT)
