"""A Space short of threads: the reference app's `slow` and `upper` with no
concurrency limit (concurrency_limit=None), so that parallel calls all run
at once and hold Gradio's worker threads (max_threads, 40 by default: the
event functions, and the synchronous routes such as /app_id (the gateway's
ping), /config and queue/join's login check, share anyio's one thread
limiter). With 50 parallel 60 s calls, 40 run and the other 10 wait for a
thread, and so do the pings and joins that come meanwhile, up to 60 s.
Each run of `slow` prints "EXEC <unix time> START|END <seconds>" (the log
start.sh writes, $ROOT/logs/threads_app-PORT.log, counts the runs). For
TestRealThreadStarved (gateway/real_threads_test.go, issue 36 item 5).

    ROOT=/tmp/realgradio bash testdata/realgradio/start.sh threads_app.py 5.49.1 7880
"""
import sys
import time

import gradio as gr

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 7860


def upper(text):
    return text.upper()


def slow(seconds):
    s = float(seconds)
    print(f"EXEC {time.time():.3f} START {s}", flush=True)  # the server's log counts the runs
    time.sleep(s)
    print(f"EXEC {time.time():.3f} END {s}", flush=True)
    return f"slept {s:.2f}s"


with gr.Blocks(analytics_enabled=False, title="threads app") as demo:
    t_in = gr.Textbox(label="text")
    t_out = gr.Textbox(label="upper")
    gr.Button("upper").click(upper, t_in, t_out, api_name="upper", concurrency_limit=None)
    s_in = gr.Number(value=3, label="seconds")
    s_out = gr.Textbox(label="result")
    gr.Button("slow").click(slow, s_in, s_out, api_name="slow", concurrency_limit=None)

if __name__ == "__main__":
    demo.launch(server_name="127.0.0.1", server_port=PORT)  # max_threads: Gradio's default, 40
