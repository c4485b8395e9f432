"""A small streaming-input app (Gradio 5+): `describe` is a webcam image's
.stream() event (connection "stream"); each chunk is an image, and the
output is its size, e.g. "4x3". A client joins it once, then sends chunks
with POST {prefix}/stream/{event_id} and ends it with .../close.

    python3 stream_app.py PORT      (Gradio 5.x, 6.x)
"""
import os
import sys

import gradio as gr

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("PORT", "7860"))


def describe(img):
    if img is None:
        return "none"
    return f"{img.width}x{img.height}"


with gr.Blocks(analytics_enabled=False, title="stream app") as demo:
    cam = gr.Image(sources=["webcam"], streaming=True, type="pil", label="cam")
    out = gr.Textbox(label="size")
    cam.stream(describe, cam, out, api_name="describe", stream_every=0.1, time_limit=30)

if __name__ == "__main__":
    demo.queue().launch(server_name="127.0.0.1", server_port=PORT)
