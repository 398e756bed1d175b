"""Issue 17, item 3: inputs that were 500s (or were stored when they should not be) answer a 422
problem+json naming the field, and nothing is stored. Store endpoints run on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest

from service.api.cursors import CursorCodec
from service.api.schemas.fields import INT64_MAX, INT64_MIN
from service.settings import Settings
from tests.api.conftest import StoreClient, measurement, run_body

PROBLEM = "application/problem+json"
#: Offsets that push a time outside years 1-9999 once converted to UTC (the issue's two examples).
OUT_OF_RANGE_TIMES = ["0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59"]
NUL = "\x00"


def _problem(response: Any, field: str | None = None, status: int = 422) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    if field is not None:
        fields = [error["field"] for error in body.get("errors", [])]
        assert field in fields or body["detail"].startswith(field), (field, body)
    return body


def _run_count(store: StoreClient) -> int:
    response = store.client.get("/v1/runs", params={"limit": 200}, headers=store.reader)
    assert response.status_code == 200, response.text
    return len(response.json()["items"])


# --------------------------------------------------------------------------------------------------
# Times whose offset leaves years 1-9999 in UTC


@pytest.mark.parametrize("time", OUT_OF_RANGE_TIMES)
def test_a_measurement_time_outside_utc_years_is_422_and_not_stored(
    store_client: StoreClient, time: str
) -> None:
    run = store_client.create_run()
    item = {**measurement(1), "time": time}
    response = store_client.client.post(
        f"/v1/runs/{run['id']}/measurements", json=[measurement(0), item], headers=store_client.writer
    )
    body = _problem(response, "body[1].time")
    assert "1-9999" in body["detail"]
    page = store_client.client.get(f"/v1/runs/{run['id']}/measurements", headers=store_client.reader)
    assert page.json()["items"] == []


@pytest.mark.parametrize("time", OUT_OF_RANGE_TIMES)
def test_a_run_started_outside_utc_years_is_422_and_not_stored(store_client: StoreClient, time: str) -> None:
    response = store_client.client.post(
        "/v1/runs", json=run_body(started_at=time), headers=store_client.writer
    )
    body = _problem(response, "body.started_at")
    # a rule the schema states in its description (JSON Schema cannot bound a date-time's UTC year): the
    # code says so, as a contract fuzz expects of every refusal of a schema-valid request
    assert [error["code"] for error in body["errors"]] == ["rule_in_description"]
    assert _run_count(store_client) == 0


@pytest.mark.parametrize("time", OUT_OF_RANGE_TIMES)
def test_finishing_a_run_outside_utc_years_is_422_and_changes_nothing(
    store_client: StoreClient, time: str
) -> None:
    run = store_client.create_run()
    response = store_client.client.patch(
        f"/v1/runs/{run['id']}", json={"status": "finished", "finished_at": time}, headers=store_client.writer
    )
    _problem(response, "body.finished_at")
    again = store_client.client.get(f"/v1/runs/{run['id']}", headers=store_client.reader).json()
    assert again["status"] == "running" and again["finished_at"] is None


@pytest.mark.parametrize("name", ["started_after", "started_before"])
@pytest.mark.parametrize("time", OUT_OF_RANGE_TIMES)
def test_a_list_filter_outside_utc_years_is_422(store_client: StoreClient, name: str, time: str) -> None:
    response = store_client.client.get("/v1/runs", params={name: time}, headers=store_client.reader)
    _problem(response, f"query.{name}")


def test_a_goodput_event_time_outside_utc_years_is_422(store_client: StoreClient) -> None:
    run = store_client.create_run()
    event = {"event_id": "e1", "kind": "job_started", "time": OUT_OF_RANGE_TIMES[0]}
    response = store_client.client.post(
        f"/v1/runs/{run['id']}/events", json=[event], headers=store_client.writer
    )
    body = _problem(response)
    # a list is validated as a list only: the error names the item, not also the one-event branch (a
    # 2,000-example fuzz found "body.EventIn: should be an object" leading the answer to a list)
    assert [(error["field"], error["code"]) for error in body["errors"]] == [
        ("body[0].time", "rule_in_description")
    ], body


# --------------------------------------------------------------------------------------------------
# Integers outside 64 bits


@pytest.mark.parametrize("value", [INT64_MAX + 1, 2**70, INT64_MIN, INT64_MIN - 1])
@pytest.mark.parametrize("name", ["min_parameters", "max_parameters"])
def test_a_parameter_filter_outside_64_bits_is_422(store_client: StoreClient, name: str, value: int) -> None:
    response = store_client.client.get("/v1/runs", params={name: value}, headers=store_client.reader)
    _problem(response, f"query.{name}")


@pytest.mark.parametrize("value", [INT64_MAX + 1, 2**70, INT64_MIN - 1])
@pytest.mark.parametrize("name", ["min_step", "max_step"])
def test_a_step_filter_outside_64_bits_is_422(store_client: StoreClient, name: str, value: int) -> None:
    run = store_client.create_run()
    response = store_client.client.get(
        f"/v1/runs/{run['id']}/measurements", params={name: value}, headers=store_client.reader
    )
    _problem(response, f"query.{name}")


def test_the_largest_64_bit_filter_is_answered(store_client: StoreClient) -> None:
    store_client.create_run()
    response = store_client.client.get(
        "/v1/runs", params={"min_parameters": 0, "max_parameters": INT64_MAX}, headers=store_client.reader
    )
    assert response.status_code == 200, response.text
    assert len(response.json()["items"]) == 1


# --------------------------------------------------------------------------------------------------
# NUL characters


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"tags": ["ok", f"pre{NUL}train"]}, "body.tags[1]"),
        ({"cluster": f"eu{NUL}west"}, "body.cluster"),
        ({"framework": f"megatron{NUL}"}, "body.framework"),
        ({"scheduler_job_id": f"{NUL}job"}, "body.scheduler_job_id"),
        ({"model": {"hf_config": {"model_type": "llama", "name": f"x{NUL}"}}}, "body.model.hf_config"),
        (
            {
                "model": {
                    "dimensions": {
                        "name": f"tiny{NUL}",
                        "n_layers": 2,
                        "d_model": 256,
                        "n_heads": 4,
                        "vocab_size": 32000,
                    }
                }
            },
            "body.model.dimensions.name",
        ),
        ({"model": {"preset": f"llama3-8b{NUL}"}}, "body.model.preset"),
        ({"hardware": {"accelerator": f"h100-sxm{NUL}", "count": 8}}, "body.hardware.accelerator"),
    ],
)
def test_a_nul_in_a_run_is_422_naming_it_and_not_stored(
    store_client: StoreClient, overrides: dict[str, Any], field: str
) -> None:
    response = store_client.client.post("/v1/runs", json=run_body(**overrides), headers=store_client.writer)
    body = _problem(response, field)
    assert "NUL" in body["detail"] or "\\x00" in body["detail"]
    assert _run_count(store_client) == 0


@pytest.mark.parametrize("path", ["/v1/predictions/step", "/v1/plans/parallelism"])
def test_a_nul_in_a_cluster_accelerator_is_422_naming_it(store_client: StoreClient, path: str) -> None:
    # was a 500: the cluster's accelerator took any text and a NUL failed only deeper, on the way to the
    # catalog (found by a 2,000-example contract fuzz)
    body = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"accelerator": f"h100{NUL}", "device_count": 8},
        "seq_len_tokens": 8192,
        "global_batch_sequences": 64,
    }
    _problem(store_client.client.post(path, json=body), "body.cluster.accelerator")


def test_a_nul_in_patched_tags_is_422(store_client: StoreClient) -> None:
    run = store_client.create_run()
    response = store_client.client.patch(
        f"/v1/runs/{run['id']}", json={"add_tags": [f"a{NUL}b"]}, headers=store_client.writer
    )
    _problem(response, "body.add_tags[0]")
    assert store_client.client.get(f"/v1/runs/{run['id']}", headers=store_client.reader).json()["tags"] == [
        "pretrain"
    ]


@pytest.mark.parametrize("name", ["accelerator", "model", "cluster", "tag", "cursor"])
def test_a_nul_in_a_list_filter_is_422_naming_it(store_client: StoreClient, name: str) -> None:
    response = store_client.client.get("/v1/runs", params={name: f"x{NUL}y"}, headers=store_client.reader)
    _problem(response, f"query.{name}")


@pytest.mark.parametrize("suffix", ["", "/measurements", "/efficiency", "/events", "/goodput"])
def test_a_nul_in_a_run_id_path_is_422(store_client: StoreClient, suffix: str) -> None:
    run = store_client.create_run()
    response = store_client.client.get(f"/v1/runs/{run['id']}%00{suffix}", headers=store_client.reader)
    _problem(response, "path")


def test_a_nul_in_a_compared_id_is_422(store_client: StoreClient) -> None:
    run = store_client.create_run()
    response = store_client.client.post(
        "/v1/runs/compare", json={"run_ids": [run["id"], f"run_{NUL}"]}, headers=store_client.reader
    )
    _problem(response, "body.run_ids[1]")


def test_a_nul_in_the_stats_run_id_is_422(store_client: StoreClient) -> None:
    response = store_client.client.get(
        "/v1/stats/mfu", params={"run_id": f"run_{NUL}"}, headers=store_client.reader
    )
    _problem(response, "query.run_id")


def test_a_nul_in_an_event_id_is_422(store_client: StoreClient) -> None:
    run = store_client.create_run()
    event = {"event_id": f"e{NUL}1", "kind": "job_started", "time": "2026-12-02T10:00:00Z"}
    response = store_client.client.post(
        f"/v1/runs/{run['id']}/events", json=[event], headers=store_client.writer
    )
    # The events body is one event or a list: pydantic names the union member in the path.
    body = _problem(response)
    assert any(error["field"].endswith("[0].event_id") for error in body["errors"]), body


def test_a_percent_encoded_percent_zero_zero_is_text_not_a_nul(store_client: StoreClient) -> None:
    """``%2500`` is the three characters ``%00``: a valid cluster name, not a NUL."""
    store_client.create_run(cluster="c%00")
    response = store_client.client.get("/v1/runs?cluster=c%2500", headers=store_client.reader)
    assert response.status_code == 200, response.text
    assert [run["cluster"] for run in response.json()["items"]] == ["c%00"]


# --------------------------------------------------------------------------------------------------
# Cursors


def _unsigned(payload: dict[str, Any]) -> str:
    """A cursor in the old, unsigned format: base64url of the JSON payload."""
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


def _first_page_cursor(store: StoreClient, path: str, **params: Any) -> str:
    response = store.client.get(path, params={"limit": 1, **params}, headers=store.reader)
    assert response.status_code == 200, response.text
    cursor: str = response.json()["next_cursor"]
    assert cursor
    return cursor


def _filters_fingerprint(cursor: str, codec: CursorCodec) -> Any:
    return codec.decode(cursor)["f"]


def test_hand_made_and_edited_run_cursors_are_422_never_500(store_client: StoreClient) -> None:
    for _ in range(2):
        store_client.create_run()
    genuine = _first_page_cursor(store_client, "/v1/runs")
    codec: CursorCodec = store_client.client.app.state.cursor_codec  # type: ignore[attr-defined]
    fingerprint = _filters_fingerprint(genuine, codec)
    body, _, signature = genuine.partition(".")
    hand_made = [
        _unsigned({"v": "2026-12-02T10:00:00+00:00", "k": 2**70, "f": fingerprint}),
        _unsigned({"v": "0001-01-01T00:00:00+23:59", "k": 1, "f": fingerprint}),
        body + "." + signature[::-1],
        body[:-2] + "." + signature,
        "garbage",
        "%%%.%%%",
        ".",
        "é.é",
    ]
    # Signed with the server's own key (a leaked key): the values are still checked.
    signed_bad_values = [
        codec.encode({"v": "2026-12-02T10:00:00+00:00", "k": 2**70, "f": fingerprint}),
        codec.encode({"v": "2026-12-02T10:00:00+00:00", "k": True, "f": fingerprint}),
        codec.encode({"v": "0001-01-01T00:00:00+23:59", "k": 1, "f": fingerprint}),
        codec.encode({"v": "2026-12-02T10:00:00", "k": 1, "f": fingerprint}),
        codec.encode({"v": 12, "k": 1, "f": fingerprint}),
        codec.encode({"v": "2026-12-02T10:00:00+00:00", "k": "1", "f": fingerprint}),
    ]
    for cursor in hand_made + signed_bad_values:
        response = store_client.client.get("/v1/runs", params={"cursor": cursor}, headers=store_client.reader)
        _problem(response, "query.cursor")
    assert store_client.client.get(
        "/v1/runs", params={"cursor": genuine}, headers=store_client.reader
    ).is_success


def test_an_mfu_sorted_cursor_with_an_out_of_range_value_is_422(store_client: StoreClient) -> None:
    for _ in range(2):
        store_client.create_run()
    genuine = _first_page_cursor(store_client, "/v1/runs", sort="median_mfu")
    codec: CursorCodec = store_client.client.app.state.cursor_codec  # type: ignore[attr-defined]
    fingerprint = _filters_fingerprint(genuine, codec)
    for value in [1e308, -1e308, 2, "0.5", True, None]:
        cursor = codec.encode({"v": value, "k": 1, "f": fingerprint})
        response = store_client.client.get(
            "/v1/runs", params={"cursor": cursor, "sort": "median_mfu"}, headers=store_client.reader
        )
        _problem(response, "query.cursor")


def test_hand_made_measurement_cursors_are_422_never_500(store_client: StoreClient) -> None:
    run = store_client.create_run()
    store_client.add(run["id"], [measurement(step) for step in range(3)])
    path = f"/v1/runs/{run['id']}/measurements"
    genuine = _first_page_cursor(store_client, path)
    codec: CursorCodec = store_client.client.app.state.cursor_codec  # type: ignore[attr-defined]
    scope = _filters_fingerprint(genuine, codec)
    for cursor in [
        _unsigned({"k": 2**70, "f": scope}),
        _unsigned({"k": 0, "f": scope}),
        codec.encode({"k": 2**70, "f": scope}),
        codec.encode({"k": -(2**64), "f": scope}),
        codec.encode({"k": False, "f": scope}),
        codec.encode({"k": 1.5, "f": scope}),
        "x" * 400,
    ]:
        _problem(
            store_client.client.get(path, params={"cursor": cursor}, headers=store_client.reader),
            "query.cursor",
        )
    page = store_client.client.get(path, params={"cursor": genuine, "limit": 1}, headers=store_client.reader)
    assert [item["step"] for item in page.json()["items"]] == [1]


def test_cursors_are_accepted_across_replicas_of_one_database_and_with_one_secret() -> None:
    payload = {"k": 7, "f": "scope"}
    url = "postgresql+psycopg://teff@db:5432/teff"
    one, two = (
        CursorCodec.for_settings(Settings(database_url=url)),
        CursorCodec.for_settings(Settings(database_url=url)),
    )
    assert two.decode(one.encode(payload)) == payload
    other_database = CursorCodec.for_settings(Settings(database_url=url + "2"))
    with pytest.raises(Exception, match="not one this service issued"):
        other_database.decode(one.encode(payload))
    secret_a = CursorCodec.for_settings(Settings(database_url=url, cursor_secret="s3cret-value"))
    secret_b = CursorCodec.for_settings(Settings(database_url=url + "2", cursor_secret="s3cret-value"))
    assert secret_b.decode(secret_a.encode(payload)) == payload
    with pytest.raises(Exception, match="not one this service issued"):
        one.decode(secret_a.encode(payload))


def _published_tag_pattern(store_client: StoreClient) -> str:
    schema = store_client.client.get("/openapi.json").json()["components"]["schemas"]["RunUpdate"]
    (items,) = [branch["items"] for branch in schema["properties"]["add_tags"]["anyOf"] if "items" in branch]
    return str(items["pattern"])


# Every character some dialect calls whitespace (Python's str.isspace(), ECMA-262's \s with U+FEFF), and
# zero-width U+200B that none does: a contract fuzz once sent U+0085, which the schema allowed and the
# server stripped to an empty tag (422).
_BLANKS = sorted({chr(i) for i in range(0x110000) if chr(i).isspace()} | {"\ufeff", "\u200b"})


def test_a_tag_is_accepted_exactly_when_the_published_schema_allows_it(store_client: StoreClient) -> None:
    pattern = re.compile(_published_tag_pattern(store_client))
    run = store_client.create_run()
    disagreements = []
    for blank in _BLANKS:
        for tag in (blank, blank + "x", "x" + blank, blank + "x" + blank):
            response = store_client.client.patch(
                f"/v1/runs/{run['id']}", json={"add_tags": [tag]}, headers=store_client.writer
            )
            if (response.status_code == 200) != bool(pattern.match(tag)):
                disagreements.append((tag, response.status_code))
            elif response.status_code == 200:
                # stored without the blanks around it that the schema calls whitespace (those that
                # cannot be a tag alone), nothing else changed
                stripped = tag if pattern.match(blank) else tag.strip(blank)
                assert stripped in response.json()["tags"], (tag, response.json()["tags"])
    assert disagreements == []


@pytest.mark.parametrize("key", ["device_count", "count"])
def test_a_device_count_past_a_32_bit_column_is_422_and_not_stored(
    store_client: StoreClient, key: str
) -> None:
    # Found by the PostgreSQL contract fuzz (2026-12-06): 5,108,796,972 devices was a 500 there
    # (`integer out of range`), stored on SQLite. The bound is cluster.device_count's.
    hardware = {"custom": {"name": "lab", "peak_tflops": {"bf16": 900.0}}, key: 5_108_796_972}
    response = store_client.client.post(
        "/v1/runs", json=run_body(hardware=hardware), headers=store_client.writer
    )
    body = _problem(response)
    assert body["errors"][0]["field"] in {"body.hardware.device_count", "body.hardware.count"}
    assert "1048576" in body["errors"][0]["message"].replace(",", "").replace("_", "")
    assert _run_count(store_client) == 0
