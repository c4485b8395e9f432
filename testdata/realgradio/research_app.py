"""The captured reference app: the six-endpoint app whose real Gradio 5.49.1
and 3.50.2 traffic is recorded in gradio/gradiotest/testdata/conformance and
gradio/testdata/transcripts. Its /config and /info match those captures
component for component (TestConformanceRawWire's config_exact and info
checks compare them exactly when the app's title is this one).

    python3 research_app.py PORT      (Gradio 3.50.2 ... 6.x)

Endpoints (api_name): upper, count, slow, counter, fail, reverse_file. It
differs from a plain six-tab app only in layout details the captures show:
tabs placed directly in the Blocks (Gradio adds their Tabs parent last), the
State created before the textboxes of its tab, and the labels.
"""
import os
import sys
import tempfile
import time

import gradio as gr

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("PORT", "7860"))
MAJOR = int(gr.__version__.split(".")[0])


def upper(text):
    """plain function: text -> uppercased text"""
    return text.upper()


def count(n):
    """generator: yields several partial outputs with small sleeps"""
    out = []
    for i in range(int(n)):
        time.sleep(0.3)
        out.append(str(i))
        yield " ".join(out)


def slow(seconds):
    """long-running: sleeps N seconds"""
    s = float(seconds)
    time.sleep(s)
    return f"slept {s:.2f}s"


def counter(text, items):
    """uses gr.State: appends text to a per-session list"""
    items = list(items or []) + [text]
    return f"{len(items)} items: {', '.join(items)}", items


def fail(text):
    """raises gr.Error"""
    raise gr.Error(f"deliberate failure for input '{text}'")


def reverse_file(f):
    """takes a file, returns a (new) file"""
    path = f if isinstance(f, str) else getattr(f, "name", None) or f["path"]
    with open(path, "rb") as fh:
        data = fh.read()
    outdir = tempfile.mkdtemp(prefix="reverse_")
    out = os.path.join(outdir, "reversed_" + os.path.basename(path))
    with open(out, "wb") as fh:
        fh.write(data[::-1])
    return out


with gr.Blocks(analytics_enabled=False, title="realgradio research app") as demo:
    with gr.Tab("upper"):
        t_in = gr.Textbox(label="text")
        t_out = gr.Textbox(label="upper")
        gr.Button("upper").click(upper, t_in, t_out, api_name="upper")
    with gr.Tab("count"):
        c_in = gr.Number(value=5, label="n")
        c_out = gr.Textbox(label="partial")
        gr.Button("count").click(count, c_in, c_out, api_name="count")
    with gr.Tab("slow"):
        s_in = gr.Number(value=3, label="seconds")
        s_out = gr.Textbox(label="result")
        gr.Button("slow").click(slow, s_in, s_out, api_name="slow")
    with gr.Tab("state"):
        k_state = gr.State([])
        k_in = gr.Textbox(label="item")
        k_out = gr.Textbox(label="history")
        gr.Button("add").click(counter, [k_in, k_state], [k_out, k_state], api_name="counter")
    with gr.Tab("fail"):
        f_in = gr.Textbox(label="text")
        f_out = gr.Textbox(label="never")
        gr.Button("fail").click(fail, f_in, f_out, api_name="fail")
    with gr.Tab("file"):
        r_in = gr.File(label="in")
        r_out = gr.File(label="out")
        gr.Button("reverse").click(reverse_file, r_in, r_out, api_name="reverse_file")

if MAJOR < 4:
    demo.queue()  # Gradio 3: the queue (over WebSocket) is off unless asked for

if __name__ == "__main__":
    demo.launch(server_name="127.0.0.1", server_port=PORT)
