"""A stand-in for `vllm serve` of vLLM 0.6.6 that answers as its OpenAI-compatible server does,
without a model: GET /health, GET /version, and POST /v1/completions streamed. Every byte of the
stream is laid out as vLLM 0.6.6 lays it out; where each field comes from is said beside it
(paths in https://github.com/vllm-project/vllm/tree/v0.6.6, read from the release's source).

Run as a program it is the `vllm serve` of a stand-in `vllm` executable:

    python vllm_openai_stub.py --port 8000 [--version 0.6.6] [--fail-every N]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# Seconds the stub "computes": before the first token (prefill) and per further token (decode).
PREFILL_SECONDS = 0.02
DECODE_SECONDS = 0.002


def _compact(obj: dict[str, Any]) -> str:
    # pydantic's model_dump_json writes no spaces between separators, fields in declaration order.
    return json.dumps(obj, separators=(",", ":"))


def stream_chunk(request_id: str, created: int, model: str, text: str, finish: str | None) -> str:
    """One token's event. vllm/entrypoints/openai/serving_completion.py
    `completion_stream_generator`: `CompletionStreamResponse(id=request_id, created=created_time,
    model=model_name, choices=[CompletionResponseStreamChoice(index=i, text=delta_text,
    logprobs=logprobs, finish_reason=finish_reason, stop_reason=stop_reason)])`, written with
    `chunk.model_dump_json(exclude_unset=False)`, so every field is there, None as null; no
    `usage` unless stream_options.continuous_usage_stats (then it is null here: not asked for)."""
    return _compact(
        {
            "id": request_id,  # f"cmpl-{self._base_request_id(raw_request)}": a uuid4 hex
            "object": "text_completion",  # protocol.py CompletionStreamResponse.object default
            "created": created,  # int(time.time()) when the request arrived
            "model": model,  # the served model name the request named
            "choices": [
                {
                    "index": 0,  # output.index + prompt_idx * num_choices: one prompt, n=1
                    "text": text,  # delta_text: the new text only
                    "logprobs": None,  # request.logprobs is None
                    "finish_reason": finish,  # "length" on the max_tokens-th token, else null
                    "stop_reason": None,  # no stop string or token id ended it
                }
            ],
            "usage": None,  # Optional[UsageInfo] = None, kept by exclude_unset=False
        }
    )


def usage_chunk(request_id: str, created: int, model: str, prompt_tokens: int, completion_tokens: int) -> str:
    """The last event before [DONE] when stream_options.include_usage: `CompletionStreamResponse(
    id, created, model, choices=[], usage=final_usage_info)` written with `exclude_unset=False,
    exclude_none=True`; UsageInfo's fields in protocol.py order (prompt_tokens, total_tokens,
    completion_tokens; prompt_tokens_details None, so left out)."""
    return _compact(
        {
            "id": request_id,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
                "completion_tokens": completion_tokens,
            },
        }
    )


def error_body(message: str) -> str:
    """An ErrorResponse (protocol.py: object "error", message, type, param, code), as
    `create_error_response` returns it with HTTP 400 (serving_engine.py)."""
    return _compact(
        {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}
    )


class Stub(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, version: str, fail_every: int = 0) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.version = version
        self.fail_every = fail_every
        self.requests = 0
        self.lock = threading.Lock()

    def count(self) -> int:
        with self.lock:
            self.requests += 1
            return self.requests


class Handler(BaseHTTPRequestHandler):
    server: Stub
    protocol_version = "HTTP/1.1"  # uvicorn answers in HTTP/1.1, the stream chunked

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the real server's access log is not what the probe reads

    def _json(self, status: int, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":  # api_server.py `health`: an empty 200
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/version":  # api_server.py `show_version`: {"version": VLLM_VERSION}
            self._json(200, _compact({"version": self.server.version}))
        else:
            self._json(404, _compact({"detail": "Not Found"}))  # FastAPI's own 404

    def do_POST(self) -> None:
        if self.path != "/v1/completions":
            self._json(404, _compact({"detail": "Not Found"}))
            return
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        number = self.server.count()
        if self.server.fail_every and number % self.server.fail_every == 0:
            self._json(400, error_body("This model's maximum context length is 32768 tokens."))
            return
        prompt = request["prompt"]
        prompt_tokens = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        max_tokens = int(request.get("max_tokens") or 16)
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        request_id = f"cmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        model = str(request["model"])
        # StreamingResponse(content=generator, media_type="text/event-stream"): chunked, no length.
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        time.sleep(PREFILL_SECONDS)  # the stub's prefill: the time the client measures as TTFT
        for token in range(max_tokens):
            if token:
                time.sleep(DECODE_SECONDS)
            finish = "length" if token == max_tokens - 1 else None
            self._event(stream_chunk(request_id, created, model, f" tok{token}", finish))
        if include_usage:
            self._event(usage_chunk(request_id, created, model, prompt_tokens, max_tokens))
        self._event("[DONE]")  # `yield "data: [DONE]\n\n"` ends every stream
        self.wfile.write(b"0\r\n\r\n")

    def _event(self, data: str) -> None:
        # Each event is `f"data: {json}\n\n"`, one HTTP chunk each.
        payload = f"data: {data}\n\n".encode()
        self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        self.wfile.flush()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--version", default="0.6.6")
    parser.add_argument("--fail-every", type=int, default=0)
    args = parser.parse_args()
    Stub(args.port, args.version, args.fail_every).serve_forever()


if __name__ == "__main__":
    main()
