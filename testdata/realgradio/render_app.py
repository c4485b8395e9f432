"""A small gr.render app (Gradio 4.31+): calling `show` with n renders n
textbox+button blocks, the i-th button's click the endpoint `shout_i`
(the text upper-cased, with i+1 "!"). The rendered endpoints are not in
/config: a client learns them from show's render_config, per session.

    python3 render_app.py PORT      (Gradio 4.44.1 ... 6.x)
"""
import os
import sys

import gradio as gr

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else int(os.environ.get("PORT", "7860"))

with gr.Blocks(analytics_enabled=False, title="render app") as demo:
    n = gr.Number(value=1, label="n", precision=0)
    go = gr.Button("render")

    @gr.render(inputs=n, triggers=[go.click])
    def show(k):
        for i in range(int(k or 0)):
            t = gr.Textbox(label=f"text {i}")
            b = gr.Button(f"shout {i}")
            b.click(lambda s, i=i: s.upper() + "!" * (i + 1), t, t, api_name=f"shout_{i}")

if __name__ == "__main__":
    demo.queue().launch(server_name="127.0.0.1", server_port=PORT)
