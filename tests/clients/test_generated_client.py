"""A client generated from openapi.yaml by openapi-python-client (offline, into a temporary folder)
drives runs, measurements and efficiency against a real server process: the contract is one a
generator can use (unique component names, no operation skipped, answers that parse)."""

from __future__ import annotations

import importlib
import shutil
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from service.domain import fleet
from tests.api.conftest import measurement, run_body
from tests.api.test_fleet_metrics import MFU_PER_TOKEN_PER_SECOND
from tests.clients.conftest import KeyedServer
from tests.conftest import skip_or_fail

CONTRACT = Path(__file__).resolve().parents[2] / "openapi.yaml"
PACKAGE = "teff_generated_client"


def _generator() -> str | None:
    beside_python = Path(sys.executable).parent / "openapi-python-client"
    return str(beside_python) if beside_python.exists() else shutil.which("openapi-python-client")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(the generator's output, the generated package's folder), the package importable."""
    generator = _generator()
    if generator is None:
        skip_or_fail("generated-client test skipped: no openapi-python-client (the dev extra installs it)")
    assert generator is not None
    root = tmp_path_factory.mktemp("generated")
    # Its post-hooks run ruff; the venv's bin holds it.
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(root)}
    done = subprocess.run(
        [
            generator,
            "generate",
            "--path",
            str(CONTRACT),
            "--output-path",
            str(root / PACKAGE),
            "--meta",
            "none",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    sys.path.insert(0, str(root))
    try:
        yield output, root / PACKAGE
    finally:
        sys.path.remove(str(root))
        for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


def test_the_generator_skips_nothing(generated: tuple[str, Path]) -> None:
    output, package = generated
    # It warns for every operation or schema it cannot generate (and then leaves it out).
    assert "Warning" not in output and "WARNING" not in output, output
    for operation in ("create_run", "add_measurements", "get_run", "list_runs", "get_run_efficiency"):
        assert (package / "api" / "runs" / f"{operation}.py").exists(), operation
    for model in ("run_read", "run_page", "run_parameter_counts_read", "model_parameter_counts_read"):
        assert (package / "models" / f"{model}.py").exists(), model


def test_runs_measurements_and_efficiency_through_the_generated_client(
    generated: tuple[str, Path], keyed_server: KeyedServer
) -> None:
    client_module = _module("client")
    models = _module("models")
    create_run = _module("api.runs.create_run")
    add_measurements = _module("api.runs.add_measurements")
    get_run = _module("api.runs.get_run")
    list_runs = _module("api.runs.list_runs")
    get_run_efficiency = _module("api.runs.get_run_efficiency")
    with client_module.AuthenticatedClient(
        base_url=keyed_server.base_url, token=keyed_server.api_key, prefix="", auth_header_name="X-API-Key"
    ) as client:
        created = create_run.sync_detailed(client=client, body=models.RunCreate.from_dict(run_body()))
        assert created.status_code == 201, created.content
        run: Any = created.parsed
        assert isinstance(run, models.RunRead)
        assert run.accelerator_id == "h100-sxm" and run.device_count == 64

        rates = [2.0e5, 2.6e5, 2.3e5, 1.9e5]
        single = models.AddMeasurementsMeasurementIn.from_dict(measurement(1, rates[0]))
        one = add_measurements.sync_detailed(run.id, client=client, body=single)
        assert one.status_code == 200, one.content
        batch = [
            models.AddMeasurementsMeasurementInBatchItem.from_dict(measurement(step, rate))
            for step, rate in enumerate(rates[1:], 2)
        ]
        added: Any = add_measurements.sync(run.id, client=client, body=batch)
        assert isinstance(added, models.MeasurementsAdded), added
        assert added.stored == len(batch)

        fetched: Any = get_run.sync(run.id, client=client)
        assert isinstance(fetched, models.RunRead)
        assert fetched.summary.measurement_count == len(rates)
        page: Any = list_runs.sync(client=client)
        assert isinstance(page, models.RunPage)
        assert run.id in [item.id for item in page.items]

        efficiency: Any = get_run_efficiency.sync(run.id, client=client)
        assert isinstance(efficiency, models.RunEfficiency), efficiency
        assert efficiency.measurement_count == len(rates)
        # The run's median MFU against the MFU computed here from the rates sent (histogram resolution).
        expected_median = statistics.median(rates) * MFU_PER_TOKEN_PER_SECOND
        assert efficiency.mfu.median == pytest.approx(expected_median, abs=fleet.MFU_BIN_WIDTH)
        assert efficiency.mfu.latest == pytest.approx(rates[-1] * MFU_PER_TOKEN_PER_SECOND, rel=1e-9)

        missing = get_run.sync_detailed("run_doesnotexist", client=client)
        assert missing.status_code == 404
        assert isinstance(missing.parsed, models.Problem)
