"""Six-case check of the official Python gradio_client against one URL.

    python3 six_cases.py URL [SECONDS_PER_CASE]

URL serves the reference app (testdata/realgradio/app.py), straight or
through the gateway's front door. Used by `make test-real`
(internal/realcompat) with the gradio_client of a real Gradio release; not
run in CI, which has no Python client. Prints one JSON object per line:
{"name", "ok", "detail"}. A case that does not finish within its time is
reported as such (old clients hang on protocols they do not speak), and the
process exits without waiting for it.
"""
import json
import os
import sys
import tempfile
import threading


def emit(name, ok, detail):
    print(json.dumps({"name": name, "ok": bool(ok), "detail": str(detail)[:300]}), flush=True)


def timed(name, seconds, fn):
    """Runs fn in a thread; returns (finished, value or exception)."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except Exception as e:  # noqa: BLE001 - every failure is a result here
            box["error"] = e

    th = threading.Thread(target=run, daemon=True, name=name)
    th.start()
    th.join(seconds)
    if th.is_alive():
        return False, None
    return True, box.get("error", box.get("value"))


def file_arg(path):
    # The client's way of marking a file argument changed twice:
    # handle_file (1.0+), file (0.8-0.17), a bare path before that.
    try:
        from gradio_client import handle_file

        return handle_file(path)
    except ImportError:
        pass
    try:
        from gradio_client import file as as_file

        return as_file(path)
    except ImportError:
        return path


def main():
    url = sys.argv[1]
    limit = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    import gradio_client
    from gradio_client import Client

    emit("client_version", True, gradio_client.__version__)
    ok, c = timed("connect", limit, lambda: Client(url, verbose=False))
    if not ok or isinstance(c, Exception):
        emit("connect", False, "timed out" if not ok else repr(c))
        return
    emit("connect", True, "")

    def case(name, fn, check):
        ok, got = timed(name, limit, fn)
        if not ok:
            emit(name, False, f"no answer within {limit:.0f} s")
            return
        try:
            good = check(got)
        except Exception as e:  # noqa: BLE001
            good, got = False, e
        emit(name, good, repr(got))

    case("predict", lambda: c.predict("hello", api_name="/upper"), lambda r: r == "HELLO")

    def generator():
        job = c.submit(3, api_name="/count")
        partial = list(job)
        return partial, job.result()

    case("generator_stream", generator, lambda r: r[1] == "0 1 2" and len(r[0]) >= 1 and r[0][-1] == "0 1 2")

    def state():
        first = c.predict("apple", api_name="/counter")
        second = c.predict("banana", api_name="/counter")
        return first, second

    case("state", state, lambda r: r == ("1 items: apple", "2 items: apple, banana"))

    def gr_error():
        try:
            return c.predict("boom", api_name="/fail")
        except Exception as e:  # noqa: BLE001 - the app's error is the answer
            return e

    case("gr_error", gr_error, lambda r: isinstance(r, Exception) and "deliberate failure for input 'boom'" in str(r))

    def upload_download():
        d = tempfile.mkdtemp()
        src = os.path.join(d, "payload.txt")
        with open(src, "wb") as f:
            f.write(b"abc123\n")
        out = c.predict(file_arg(src), api_name="/reverse_file")
        path = out if isinstance(out, str) else out.get("path") if isinstance(out, dict) else out
        with open(path, "rb") as f:
            return f.read()

    case("upload_download", upload_download, lambda r: r == b"\n321cba")


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # hung case threads must not keep the process alive
