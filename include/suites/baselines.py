"""Load baselines.yaml and turn it into expectations for one node: the floors of its GPU model
(scaled by the GPU count) and the counts it must show (Expectations: GPUs, HCAs and their rate and
width, NVLinks per GPU, PCIe generation and width), per model with sources, overridable per node pool."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .harness.checks import SuiteError

SCALES = ("none", "per_gpu", "nic_share")


def normalize_model(name: str | None) -> str:
    """'NVIDIA-H100-80GB-HBM3', 'NVIDIA H100 80GB HBM3' -> 'nvidia h100 80gb hbm3'.

    GPU feature discovery appends '-SHARED' for time-sliced GPUs; the hardware is the same."""
    if not name:
        return ""
    s = name.strip().lower()
    s = re.sub(r"[-_\s]+shared$", "", s)
    return re.sub(r"[-_\s]+", " ", s).strip()


@dataclass(frozen=True)
class Expectation:
    metric: str
    value: float
    tolerance: float
    source: str
    scale: str = "none"

    @property
    def floor(self) -> float:
        return self.value * (1.0 - self.tolerance)

    def scaled(self, n_gpus: int, hcas: int | None = None) -> "Expectation":
        """The expectation for a run over n_gpus GPUs; `hcas` is the node's EXPECTED HCA count."""
        factor = 1.0
        if self.scale == "per_gpu":
            factor = float(n_gpus)
        elif self.scale == "nic_share" and hcas and n_gpus:
            factor = min(1.0, hcas / n_gpus)
        if factor == 1.0:
            return self
        return Expectation(
            self.metric,
            self.value * factor,
            self.tolerance,
            f"{self.source}; scaled x{factor:.3g} for {n_gpus} GPU(s)",
            "none",
        )

    def basis(self) -> str:
        return f"baseline {self.value:.4g} -{self.tolerance:.0%}; {self.source}"


class Baselines:
    def __init__(self, data: dict, path: str = "<memory>"):
        self.path = path
        self.data = data
        self.models: dict[str, dict] = data.get("models") or {}
        self._alias: dict[str, str] = {}
        for key, model in self.models.items():
            for alias in [key, model.get("name", "")] + list(model.get("aliases") or []):
                if alias:
                    self._alias.setdefault(normalize_model(alias), key)
        self.relative_tolerance = float((data.get("defaults") or {}).get("relative_tolerance", 0.10))

    @classmethod
    def load(cls, path: str) -> "Baselines":
        try:
            import yaml
        except ImportError as exc:  # pragma: no cover - yaml is in the image
            raise SuiteError(f"pyyaml missing, cannot read baselines: {exc}") from exc
        try:
            with open(path, encoding="utf-8") as fh:
                data = yaml.safe_load(fh)
        except OSError as exc:
            raise SuiteError(f"cannot read baselines {path}: {exc.strerror or exc}") from exc
        except yaml.YAMLError as exc:
            raise SuiteError(f"baselines {path} is not valid YAML: {str(exc).splitlines()[0]}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
            raise SuiteError(f"baselines {path}: expected a mapping with a 'models' section")
        b = cls(data, path)
        b.validate()
        return b

    def validate(self) -> None:
        for key, model in self.models.items():
            for metric, spec in (model.get("metrics") or {}).items():
                try:
                    Expectation(
                        metric,
                        float(spec["value"]),
                        float(spec["tolerance"]),
                        str(spec["source"]),
                        spec.get("scale", "none"),
                    )
                except (KeyError, TypeError, ValueError) as exc:
                    raise SuiteError(
                        f"baselines {self.path}: models.{key}.metrics.{metric} needs numeric "
                        f"value, tolerance and a source ({exc})"
                    ) from exc
                if spec.get("scale", "none") not in SCALES or not 0 <= float(spec["tolerance"]) < 1:
                    raise SuiteError(
                        f"baselines {self.path}: models.{key}.metrics.{metric}: bad scale or tolerance"
                    )

    def resolve(self, name: str | None) -> str | None:
        return self._alias.get(normalize_model(name)) if name else None

    def model(self, key: str | None) -> dict:
        return self.models.get(key or "", {}) if key else {}

    def expectation(
        self, key: str | None, metric: str, n_gpus: int = 1, hcas: int | None = None
    ) -> Expectation | None:
        """The expectation for a run over n_gpus GPUs; `hcas` is the node's expected HCA count
        (Expectations.get("hcas")): what the node should have, never what a tool found."""
        spec = (self.model(key).get("metrics") or {}).get(metric)
        if not spec:
            return None
        e = Expectation(
            metric,
            float(spec["value"]),
            float(spec["tolerance"]),
            str(spec["source"]),
            spec.get("scale", "none"),
        )
        return e.scaled(n_gpus, hcas)

    def relative_tol(self, key: str | None) -> float:
        return float(self.model(key).get("relative_tolerance", self.relative_tolerance))

    def section(self, name: str) -> dict[str, Any]:
        return self.data.get(name) or {}


EXPECT_KEYS = ("gpus", "hcas", "nvlinks_per_gpu", "pcie_gen", "pcie_width", "ib_rate_gbps", "ib_width",
               # 0 / 1: the node has NVSwitches (its fabric state must be read), MIG mode, persistence mode
               "nvswitch", "mig", "persistence")


def parse_expect(text: str | None) -> dict[str, int]:
    """'hcas=4,nvlinks_per_gpu=12' -> {'hcas': 4, 'nvlinks_per_gpu': 12}; ValueError on anything else
    (a typo in a node pool's override must not silently lower a bar)."""
    out: dict[str, int] = {}
    for item in re.split(r"[,\s]+", (text or "").strip()):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or key.strip() not in EXPECT_KEYS or not value.strip().isdigit():
            raise ValueError(f"bad expectation {item!r}: use KEY=INTEGER with KEY one of {', '.join(EXPECT_KEYS)}")
        out[key.strip()] = int(value)
    return out


@dataclass(frozen=True)
class Expectations:
    """What this node must show, each value with where it comes from (`sources`)."""

    values: dict[str, int]
    sources: dict[str, str]

    def get(self, key: str) -> int | None:
        return self.values.get(key)

    def basis(self, key: str) -> str:
        return f"expected {self.values[key]}: {self.sources.get(key, '?')}" if key in self.values else "no expectation"

    def as_environment(self) -> dict[str, Any]:
        return {k: {"value": v, "source": self.sources.get(k)} for k, v in sorted(self.values.items())}


def expectations(baselines: "Baselines", key: str | None, args) -> Expectations:
    """The model's `expect` block, then the orchestrator's GPU count (--expected-gpus, --node-gpus)
    where it is higher (a GPU that did not enumerate lowers what the node reports, never the bar:
    harness/gpu_expectation), then the node pool's overrides (--expect / CLUSTER_DOCTOR_EXPECT):
    later ones win."""
    values: dict[str, int] = {}
    sources: dict[str, str] = {}
    block = baselines.model(key).get("expect") or {}
    srcs = block.get("sources") or {}
    for k in EXPECT_KEYS:
        if isinstance(block.get(k), int) and not isinstance(block.get(k), bool):
            values[k] = block[k]
            src = srcs.get(k) or srcs.get(k.split("_")[0]) or "no source given"
            sources[k] = f"baselines.yaml {key}: {src}"
    seen = [int(n) for n in (getattr(args, "expected_gpus", None), getattr(args, "node_gpus", None)) if n]
    if seen and max(seen) > values.get("gpus", 0):
        values["gpus"] = max(seen)
        sources["gpus"] = "--expected-gpus / --node-gpus (the node's GPUs, from the orchestrator)"
    for k, v in (getattr(args, "expect", None) or {}).items():
        values[k] = v
        sources[k] = "node pool override (--expect / CLUSTER_DOCTOR_EXPECT)"
    return Expectations(values, sources)


def model_for_node(ctx, baselines: Baselines, detected_names: list[str]) -> tuple[str | None, str | None]:
    """(baseline key, model name) from the label (--gpu-model) or the detected GPU names.

    CPU mode always uses the `cpu` entry. A label that disagrees with the hardware is a warning:
    the hardware wins because it is what the numbers were measured on."""
    if ctx.cpu:
        return ("cpu" if "cpu" in baselines.models else None), (ctx.args.gpu_model or None)
    label = ctx.args.gpu_model
    detected = next((n for n in detected_names if n), None)
    key_label = baselines.resolve(label)
    key_hw = baselines.resolve(detected)
    if label and detected and key_label and key_hw and key_label != key_hw:
        ctx.warn(
            f"GPU model label {label!r} ({key_label}) disagrees with the hardware {detected!r} ({key_hw}); "
            f"using {key_hw}"
        )
    key = key_hw or key_label
    name = detected or label
    if key is None and name:
        ctx.warn(
            f"unknown GPU model {name!r}: no baseline in {baselines.path}; only relative checks "
            f"(each GPU vs the best GPU of this node)"
        )
        # a finding, not only a warning: the orchestrator shows it once per node pool with its action
        ctx.environment["baseline_missing"] = name
        ctx.check("baseline", "skip", value=name, code="BASELINE_MISSING",
                  message=f"no baseline for GPU model {name!r} in {baselines.path}: its floors and expected "
                  f"counts are not judged; add the model (fleet-calibrated) or an alias to baselines.yaml")
    return key, name
