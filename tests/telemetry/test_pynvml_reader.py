"""PynvmlGpuReader against pynvml's own ctypes structures, with the driver calls replaced.

No GPU here: the functions that would enter libnvidia-ml are swapped for fakes, so what is
checked is how the reader builds NVML's requests (GPM sample pairs, metric ids, versions)
and turns NVML's errors into reasons.
"""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from servelab.telemetry.gpu import GpmValues, NvmlReadError, PynvmlGpuReader


class _Source:
    """The probe's NVML view, as far as the reader uses it."""

    closed = False

    def device_count(self) -> int:
        return 1

    def uuid(self, index: int) -> str | None:
        return "GPU-1"

    def name(self, index: int) -> str | None:
        return "NVIDIA H200"

    def close(self) -> None:
        self.closed = True


def _not_supported(*args):
    raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)


@pytest.fixture
def nvml(monkeypatch):
    """pynvml with its driver calls faked; `log` records GPM requests and freed samples."""
    log: dict[str, list] = {"requests": [], "freed": [], "samples": []}

    def alloc():
        sample = ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t())
        log["samples"].append(ctypes.addressof(sample.contents))
        return sample

    def metrics_get(request):
        log["requests"].append(
            (
                request.version,
                request.numMetrics,
                ctypes.addressof(request.sample1.contents),
                ctypes.addressof(request.sample2.contents),
                [request.metrics[i].metricId for i in range(request.numMetrics)],
            )
        )
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            metric.value = 10.0 * metric.metricId
            tensor = metric.metricId == pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
            metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED if tensor else pynvml.NVML_SUCCESS
        return request

    support = pynvml.c_nvmlGpmSupport_t()
    support.isSupportedDevice = 1
    fakes = {
        "nvmlDeviceGetHandleByIndex": lambda index: f"handle-{index}",
        "nvmlDeviceGetPowerUsage": lambda handle: 123_456,
        "nvmlDeviceGetPcieThroughput": lambda handle, counter: 100 + counter,
        "nvmlDeviceGetTotalEnergyConsumption": _not_supported,
        "nvmlGpmQueryDeviceSupport": lambda handle: support,
        "nvmlGpmSampleAlloc": alloc,
        "nvmlGpmSampleGet": lambda handle, sample: sample,
        "nvmlGpmMetricsGet": metrics_get,
        "nvmlGpmSampleFree": lambda sample: log["freed"].append(ctypes.addressof(sample.contents)),
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(pynvml, name, fake)
    return log, support


def test_gpm_pairs_consecutive_samples_and_reuses_buffers(nvml):
    log, _ = nvml
    source = _Source()
    reader = PynvmlGpuReader(source)  # type: ignore[arg-type]
    assert reader.gpm_unsupported_reason(0) is None
    assert reader.gpm_metrics(0) is None  # one sample: no interval yet
    first = reader.gpm_metrics(0)
    assert first == GpmValues(
        sm_util_pct=10.0 * pynvml.NVML_GPM_METRIC_SM_UTIL,
        sm_occupancy_pct=10.0 * pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
        dram_bw_util_pct=10.0 * pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
        tensor_util_pct=None,  # NVML answered NOT_SUPPORTED for that metric
    )
    reader.gpm_metrics(0)
    a, b = log["samples"]  # two buffers, taken in turn
    version, count, s1, s2, ids = log["requests"][0]
    assert (version, count, s1, s2) == (pynvml.NVML_GPM_METRICS_GET_VERSION, 4, a, b)
    assert ids == [
        pynvml.NVML_GPM_METRIC_SM_UTIL,
        pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
        pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
        pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    ]
    assert log["requests"][1][2:4] == (b, a)
    reader.close()
    assert sorted(log["freed"]) == sorted([a, b]) and source.closed


def test_gpm_unsupported_and_nvml_errors_become_reasons(nvml):
    _, support = nvml
    reader = PynvmlGpuReader(_Source())  # type: ignore[arg-type]
    support.isSupportedDevice = 0
    assert reader.gpm_unsupported_reason(0) == (
        "GPM is not supported on this GPU (it needs Hopper or newer)"
    )
    assert reader.power_mw(0) == 123_456
    assert reader.pcie_kb_s(0) == (
        100 + pynvml.NVML_PCIE_UTIL_TX_BYTES,
        100 + pynvml.NVML_PCIE_UTIL_RX_BYTES,
    )
    with pytest.raises(NvmlReadError, match=r"^Not Supported$"):
        reader.energy_mj(0)
