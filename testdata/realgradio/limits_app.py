"""A small app for the queue limits real Gradio enforces: the queue holds
at most one waiting event (demo.queue(max_size=1)) and `slow` runs one call
at a time (Gradio's default concurrency_limit=1), so a third concurrent call
is refused with Gradio's queue-full answer.

    python3 limits_app.py PORT      (Gradio 3.50.2 ... 6.x)
"""
import os
import sys
import time

import gradio as gr

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("PORT", "7860"))


def slow(seconds):
    """long-running: sleeps N seconds"""
    s = float(seconds)
    time.sleep(s)
    return f"slept {s:.2f}s"


with gr.Blocks(analytics_enabled=False, title="limits app") as demo:
    s_in = gr.Number(value=3, label="seconds")
    s_out = gr.Textbox(label="result")
    gr.Button("slow").click(slow, s_in, s_out, api_name="slow")

demo.queue(max_size=1)

if __name__ == "__main__":
    demo.launch(server_name="127.0.0.1", server_port=PORT)
