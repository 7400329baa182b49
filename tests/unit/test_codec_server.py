"""The codec server over real HTTP on loopback (aiohttp's test server): the UI's protocol,
CORS for the configured UI origin only, and refusals that decode nothing."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from aiohttp.test_utils import TestServer
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from pitstop.cli.codec import default_ui_origins
from pitstop.codec import ENCODING, AesGcmCodec
from pitstop.codec_claimcheck import ENCODING as CLAIM_CHECK
from pitstop.codec_claimcheck import ClaimCheckCodec, reference_of
from pitstop.codec_keys import parse_keyring
from pitstop.codec_server import OriginError, build_app, loopback_twins, normalize_origin
from pitstop.payload_store import DirectoryStore

KEY = "ka:" + base64.b64encode(bytes(range(32))).decode()
UI = "http://127.0.0.1:8233"
MARKER = "MARKER-codec-server"


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = build_app(AesGcmCodec(parse_keyring(KEY, "test")), [UI])
    test_server = TestServer(app, host="127.0.0.1")
    await test_server.start_server()
    yield str(test_server.make_url("")).rstrip("/")
    await test_server.close()


def body(*payloads: Payload) -> str:
    return json_format.MessageToJson(Payloads(payloads=list(payloads)))


def ui_headers(origin: str = UI) -> dict[str, str]:
    return {"Origin": origin, "Content-Type": "application/json", "X-Namespace": "default"}


async def sealed(text: str = MARKER) -> Payload:
    codec = AesGcmCodec(parse_keyring(KEY, "test"))
    [payload] = await codec.encode(
        [Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(text).encode())]
    )
    return payload


async def test_the_ui_preflight_is_allowed_with_the_headers_the_ui_sends(server: str) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.options(
            f"{server}/decode",
            headers={
                "Origin": UI,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
            },
        )
    assert response.status_code == 204
    assert response.headers["access-control-allow-origin"] == UI
    assert response.headers["access-control-allow-methods"] == "POST, OPTIONS"
    allowed = {h.strip().lower() for h in response.headers["access-control-allow-headers"].split(",")}
    assert {"content-type", "x-namespace", "authorization"} <= allowed
    assert response.headers["access-control-allow-credentials"] == "true"
    assert response.headers["vary"] == "Origin"


async def test_decode_from_the_ui_origin_returns_the_plaintext(server: str) -> None:
    payload = await sealed()
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{server}/decode", content=body(payload), headers=ui_headers())
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == UI
    [decoded] = json_format.Parse(response.text, Payloads()).payloads
    assert json.loads(decoded.data) == MARKER
    assert decoded.metadata["encoding"] == b"json/plain"


async def test_the_namespace_templated_path_of_the_temporal_cli_works_too(server: str) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{server}/default/decode", content=body(await sealed()), headers=ui_headers()
        )
    assert response.status_code == 200
    assert MARKER in base64.b64decode(response.json()["payloads"][0]["data"]).decode()


async def test_encode_for_the_ui_encrypts_with_the_active_key(server: str) -> None:
    original = Payload(metadata={"encoding": b"json/plain"}, data=b'{"approve": true}')
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{server}/encode", content=body(original), headers=ui_headers())
    assert response.status_code == 200
    [encoded] = json_format.Parse(response.text, Payloads()).payloads
    assert encoded.metadata["encoding"] == ENCODING and encoded.metadata["encryption-key-id"] == b"ka"
    assert await AesGcmCodec(parse_keyring(KEY, "test")).decode([encoded]) == [original]


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "http://127.0.0.1:8234", "https://127.0.0.1:8233", "null"]
)
async def test_another_origin_gets_no_cors_allowance_and_nothing_decoded(server: str, origin: str) -> None:
    payload = await sealed()
    async with httpx.AsyncClient() as http:
        preflight = await http.options(
            f"{server}/decode", headers={"Origin": origin, "Access-Control-Request-Method": "POST"}
        )
        response = await http.post(f"{server}/decode", content=body(payload), headers=ui_headers(origin))
    for answer in (preflight, response):
        assert answer.status_code == 403
        assert "access-control-allow-origin" not in answer.headers
        assert "access-control-allow-credentials" not in answer.headers
        assert MARKER not in answer.text
    assert "this origin may not use the codec server" in response.json()["error"]


async def test_programs_without_an_origin_are_served(server: str) -> None:
    # The Temporal CLI (`--codec-endpoint`) is not a browser and sends no Origin; CORS is a
    # browser rule, so the protection against programs is where the server listens (docs).
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{server}/decode", content=body(await sealed()), headers={"Content-Type": "application/json"}
        )
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers
    assert MARKER in base64.b64decode(response.json()["payloads"][0]["data"]).decode()


async def test_unknown_key_and_tampering_are_clear_errors(server: str) -> None:
    other = AesGcmCodec(parse_keyring("kz:" + base64.b64encode(bytes(32)).decode(), "t"))
    [foreign] = await other.encode([Payload(data=b"x")])
    good = await sealed()
    tampered = Payload(metadata=good.metadata, data=good.data[:-1] + bytes([good.data[-1] ^ 1]))
    async with httpx.AsyncClient() as http:
        unknown = await http.post(f"{server}/decode", content=body(foreign), headers=ui_headers())
        altered = await http.post(f"{server}/decode", content=body(tampered), headers=ui_headers())
    assert unknown.status_code == 400
    assert unknown.json()["error"].startswith(
        "payload was encrypted with key id 'kz' which this process does not have; add it to PITSTOP_CODEC_KEY"
    )
    assert unknown.headers["access-control-allow-origin"] == UI  # the UI can show the reason
    assert altered.status_code == 400
    assert "key id 'ka' failed authentication" in altered.json()["error"]


async def test_bad_requests_are_refused_with_what_to_send(server: str) -> None:
    async with httpx.AsyncClient() as http:
        text = await http.post(
            f"{server}/decode", content="{}", headers={**ui_headers(), "Content-Type": "text/plain"}
        )
        junk = await http.post(f"{server}/decode", content="not json", headers=ui_headers())
        health = await http.get(f"{server}/health")
    assert text.status_code == 415 and "application/json" in text.json()["error"]
    assert junk.status_code == 400 and '{"payloads": [...]}' in junk.json()["error"]
    assert health.status_code == 200 and health.json() == {"status": "ok"}


def test_origins_are_normalized_as_browsers_send_them() -> None:
    assert normalize_origin("HTTP://LocalHost:8233/") == "http://localhost:8233"
    assert normalize_origin("https://temporal.example.com:443") == "https://temporal.example.com"
    assert loopback_twins("http://127.0.0.1:8233") == ["http://127.0.0.1:8233", "http://localhost:8233"]
    assert loopback_twins("https://ui.example") == ["https://ui.example"]
    assert default_ui_origins("https://cloud.temporal.io/namespaces/x") == ["https://cloud.temporal.io"]
    with pytest.raises(OriginError, match="leave out the path"):
        normalize_origin("http://ui.example/namespaces")
    with pytest.raises(OriginError, match="is not an origin; expected scheme://host"):
        normalize_origin("ui.example:8233")


async def test_the_ui_sees_a_claim_checked_payload_itself(tmp_path: Path) -> None:
    # What a worker wrote: encrypted, then too large for history, so kept in the store.
    store = DirectoryStore(tmp_path / "payloads")
    worker_codec = ClaimCheckCodec(store, AesGcmCodec(parse_keyring(KEY, "test")), threshold=1024)
    big = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(MARKER * 500).encode())
    [reference] = await worker_codec.encode([big])
    assert reference.metadata["encoding"] == CLAIM_CHECK
    server_codec = ClaimCheckCodec(store, AesGcmCodec(parse_keyring(KEY, "test")), threshold=1024)
    test_server = TestServer(build_app(server_codec, [UI]), host="127.0.0.1")
    await test_server.start_server()
    url = str(test_server.make_url("")).rstrip("/")
    try:
        async with httpx.AsyncClient() as http:
            decoded = await http.post(f"{url}/decode", content=body(reference), headers=ui_headers())
            store.delete(reference_of(reference).sha256)
            fresh = TestServer(build_app(ClaimCheckCodec(store, server_codec.inner), [UI]), host="127.0.0.1")
            await fresh.start_server()
            missing = await http.post(
                f"{str(fresh.make_url('')).rstrip('/')}/decode", content=body(reference), headers=ui_headers()
            )
            await fresh.close()
    finally:
        await test_server.close()
    assert decoded.status_code == 200, decoded.text
    assert json_format.Parse(decoded.text, Payloads()).payloads[0] == big
    assert missing.status_code == 400 and reference_of(reference).sha256 in missing.json()["error"]
    assert "is not in this process's payload store" in missing.json()["error"]
