"""Prefill execution-time model and its calibration file.

The model is the one Vertumnus fits from no-queue profiling (paper §2.2 / §3.2,
``../shared/paper/vertumnus-walkthrough.zh.txt``)::

    E_C(R, P) = d + a*R + b*P + (c*R + alpha*W(R, P)) / C
    W(R, P)   = R*P + R*(R + 1)/2

with R the number of new (uncached suffix) tokens, P the number of cached prefix tokens and C
the CP degree. ``W`` counts the dense causal query-key pairs of an R-token suffix over a
P-token prefix; ``W(L - P, P) = (L(L+1) - P(P+1)) / 2``. Splitting ``E_C = A + B/C`` with
``A = d + aR + bP`` and ``B = cR + alpha*W`` gives the GPU-time identity used by the router,
``C*E_C - C'*E_{C'} = (C - C')*A`` for the same R, P.

Coefficients live in a versioned JSON calibration file per (model, GPU type), together with
the memory figures the simulator needs (KV bytes per token, GPU memory, weights) and the
provenance of the numbers (roofline derivation or kernel profiling). The file format is
documented in :class:`Calibration`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

CALIBRATION_FORMAT_VERSION = 1
# The one name of the shipped default calibration (paper §9 hardware and model: Qwen3-30B-A3B on
# H20-3e, 141 GB HBM3e). Everything that means "the default calibration" reads this constant.
DEFAULT_CALIBRATION = "qwen3-30b-a3b__h20-3e.json"
DEFAULT_CALIBRATION_DESCRIPTION = "Qwen3-30B-A3B on H20-3e (141 GB), roofline"


def attention_pairs(num_new_tokens: int, num_cached_tokens: int) -> int:
    """Dense causal query-key pairs ``W(R, P) = R*P + R*(R+1)/2`` (paper §2.2)."""
    r = num_new_tokens
    return r * num_cached_tokens + r * (r + 1) // 2


@dataclass(frozen=True, slots=True)
class CostCoefficients:
    """Coefficients of ``E_C(R,P)``; all >= 0.

    Attributes:
        d_s: fixed per-step overhead [s].
        a_s_per_token: per new token cost that does not shrink with C [s/token].
        b_s_per_token: per cached token cost (prefix KV access / gather) [s/token].
        c_s_per_token: per new token cost divided over the C ranks (projections, MLP) [s/token].
        alpha_s_per_pair: per query-key pair attention cost, divided over C [s/pair].
    """

    d_s: float
    a_s_per_token: float
    b_s_per_token: float
    c_s_per_token: float
    alpha_s_per_pair: float

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"cost coefficient {name} must be a finite number >= 0, got {value!r}")


class CostModel:
    """Evaluates ``E_C(R, P)`` for given coefficients.

    Args:
        coefficients: the five fitted coefficients.

    ``service_time_s`` is on the simulator's hot path, so the coefficients are copied into
    plain attributes.
    """

    __slots__ = ("coefficients", "d", "a", "b", "c", "alpha")

    def __init__(self, coefficients: CostCoefficients) -> None:
        self.coefficients = coefficients
        self.d = coefficients.d_s
        self.a = coefficients.a_s_per_token
        self.b = coefficients.b_s_per_token
        self.c = coefficients.c_s_per_token
        self.alpha = coefficients.alpha_s_per_pair

    def service_time_s(self, degree: int, num_new_tokens: int, num_cached_tokens: int) -> float:
        """Predicted no-queue prefill time ``E_C(R, P)`` [s] of one request run alone."""
        r = num_new_tokens
        p = num_cached_tokens
        return self.d + self.a * r + self.b * p + (self.c * r + self.alpha * (r * p + r * (r + 1) * 0.5)) / degree

    def split_s(self, num_new_tokens: int, num_cached_tokens: int) -> tuple[float, float]:
        """``(A, B)`` with ``E_C = A + B / C``: the CP-invariant and the CP-divided part [s]."""
        r = num_new_tokens
        p = num_cached_tokens
        return self.d + self.a * r + self.b * p, self.c * r + self.alpha * (r * p + r * (r + 1) * 0.5)

    def marginal_time_s(self, degree: int, num_new_tokens: int, num_cached_tokens: int) -> float:
        """``E_C(R, P) - d``: the part of a request's time that adds up inside a batched step [s]."""
        r = num_new_tokens
        p = num_cached_tokens
        return self.a * r + self.b * p + (self.c * r + self.alpha * (r * p + r * (r + 1) * 0.5)) / degree


@dataclass(frozen=True)
class Calibration:
    """One calibration file: cost coefficients and memory figures for a (model, GPU type).

    JSON fields (``format_version`` 1)::

        format_version        int, = 1
        model                 str, e.g. "Qwen3-30B-A3B"
        gpu_type              str, e.g. "H20"
        dtype                 str, e.g. "bfloat16"
        coefficients          {d_s, a_s_per_token, b_s_per_token, c_s_per_token, alpha_s_per_pair}
        kv_bytes_per_token    int, KV-cache bytes of one token over all layers (whole model)
        gpu_memory_bytes      int, HBM per GPU
        weight_bytes_per_gpu  int, model weights resident on each GPU (rank)
        weight_shard_gpus     int, optional (default 1): G, the GPUs over which one copy of the
                              weights is spread (expert parallel); every worker degree must be
                              a multiple of G (``PoolConfig.check_weight_shard``), so split and
                              merge never move weights
        activation_reserve_bytes int, per-GPU memory kept for activations/workspace
        max_prompt_tokens     int, longest prompt the model serves
        provenance            object: method ("roofline" | "profile"), source, created, tool,
                              and method-specific entries (datasheet, model config, grid, fit error)

    Raises:
        ValueError: on a missing or invalid field, naming the file and field.
    """

    model: str
    gpu_type: str
    coefficients: CostCoefficients
    kv_bytes_per_token: int
    gpu_memory_bytes: int
    weight_bytes_per_gpu: int
    activation_reserve_bytes: int
    max_prompt_tokens: int
    dtype: str = "bfloat16"
    weight_shard_gpus: int = 1
    provenance: dict = field(default_factory=dict, compare=False)
    format_version: int = CALIBRATION_FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.format_version != CALIBRATION_FORMAT_VERSION:
            raise ValueError(f"calibration format_version {self.format_version} is not supported; "
                             f"expected {CALIBRATION_FORMAT_VERSION}")
        for name in ("kv_bytes_per_token", "gpu_memory_bytes", "max_prompt_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"calibration field {name} must be > 0, got {getattr(self, name)!r}")
        g = self.weight_shard_gpus
        if not (isinstance(g, int) and not isinstance(g, bool) and g >= 1 and not g & (g - 1)):
            raise ValueError(f"calibration field weight_shard_gpus must be a power of two >= 1, got {g!r}")
        for name in ("weight_bytes_per_gpu", "activation_reserve_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"calibration field {name} must be >= 0, got {getattr(self, name)!r}")
        if self.kv_bytes_per_gpu <= 0:
            raise ValueError(
                f"calibration {self.model}/{self.gpu_type}: weights ({self.weight_bytes_per_gpu} B) plus activation reserve "
                f"({self.activation_reserve_bytes} B) leave no KV memory on a {self.gpu_memory_bytes} B GPU"
            )

    @property
    def kv_bytes_per_gpu(self) -> int:
        """HBM left for the KV cache on one GPU: memory - weights - activation reserve [bytes]."""
        return self.gpu_memory_bytes - self.weight_bytes_per_gpu - self.activation_reserve_bytes

    def kv_capacity_tokens(self, degree: int) -> int:
        """KV-cache capacity of a degree-C worker [tokens]: C GPUs each hold 1/C of every token's KV.
        Per rank: ``kv_capacity_tokens(1)``."""
        return (self.kv_bytes_per_gpu * degree) // self.kv_bytes_per_token

    def kv_capacity_blocks(self, degree: int, kv_block_size_tokens: int) -> int:
        """KV-cache capacity of a degree-C worker [blocks of ``kv_block_size_tokens``]."""
        return self.kv_capacity_tokens(degree) // kv_block_size_tokens

    def cost_model(self) -> CostModel:
        return CostModel(self.coefficients)

    def to_dict(self) -> dict:
        return {
            "format_version": self.format_version,
            "model": self.model,
            "gpu_type": self.gpu_type,
            "dtype": self.dtype,
            "coefficients": asdict(self.coefficients),
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "weight_bytes_per_gpu": self.weight_bytes_per_gpu,
            "weight_shard_gpus": self.weight_shard_gpus,
            "activation_reserve_bytes": self.activation_reserve_bytes,
            "max_prompt_tokens": self.max_prompt_tokens,
            "provenance": self.provenance,
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n")

    @classmethod
    def from_dict(cls, data: dict, source: str = "<dict>") -> Calibration:
        """Builds and validates a calibration from parsed JSON; errors name ``source`` and the field."""
        if not isinstance(data, dict):
            raise ValueError(f"{source}: calibration must be a JSON object, got {type(data).__name__}")
        required = ("format_version", "model", "gpu_type", "coefficients", "kv_bytes_per_token", "gpu_memory_bytes",
                    "weight_bytes_per_gpu", "activation_reserve_bytes", "max_prompt_tokens")
        for key in required:
            if key not in data:
                raise ValueError(f"{source}: calibration is missing field {key!r}")
        optional = ("dtype", "weight_shard_gpus", "provenance")
        unknown = sorted(set(data) - set(required) - set(optional))
        if unknown:
            raise ValueError(f"{source}: unknown calibration field(s) {unknown}; expected only {sorted(required + optional)}")
        coeff = data["coefficients"]
        names = ("d_s", "a_s_per_token", "b_s_per_token", "c_s_per_token", "alpha_s_per_pair")
        if not isinstance(coeff, dict):
            raise ValueError(f"{source}: field 'coefficients' must be an object with {', '.join(names)}")
        extra = sorted(set(coeff) - set(names))
        if extra:
            raise ValueError(f"{source}: unknown field(s) {['coefficients.' + k for k in extra]}; expected {', '.join(names)}")
        for key in names:
            if key not in coeff:
                raise ValueError(f"{source}: field 'coefficients.{key}' is missing")
            if not isinstance(coeff[key], (int, float)) or isinstance(coeff[key], bool):
                raise ValueError(f"{source}: field 'coefficients.{key}' must be a number, got {coeff[key]!r}")
        for key in ("format_version", "kv_bytes_per_token", "gpu_memory_bytes", "weight_bytes_per_gpu",
                    "activation_reserve_bytes", "max_prompt_tokens", "weight_shard_gpus"):
            if key in data and (not isinstance(data[key], int) or isinstance(data[key], bool)):
                raise ValueError(f"{source}: field {key!r} must be an integer, got {data[key]!r}")
        try:
            return cls(
                model=str(data["model"]),
                gpu_type=str(data["gpu_type"]),
                dtype=str(data.get("dtype", "bfloat16")),
                coefficients=CostCoefficients(**{k: float(coeff[k]) for k in names}),
                kv_bytes_per_token=data["kv_bytes_per_token"],
                gpu_memory_bytes=data["gpu_memory_bytes"],
                weight_bytes_per_gpu=data["weight_bytes_per_gpu"],
                weight_shard_gpus=data.get("weight_shard_gpus", 1),
                activation_reserve_bytes=data["activation_reserve_bytes"],
                max_prompt_tokens=data["max_prompt_tokens"],
                provenance=dict(data.get("provenance", {})),
                format_version=data["format_version"],
            )
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Reads a calibration JSON file.

        Raises:
            FileNotFoundError: if ``path`` does not exist.
            ValueError: naming the file, if it is not UTF-8 JSON or a field is missing/invalid.
        """
        p = Path(path)
        if p.is_dir():
            raise IsADirectoryError(21, "is a folder, expected a calibration JSON file", str(p))
        if not p.exists():
            raise FileNotFoundError(2, "calibration file does not exist", str(p))
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                             "expected a calibration JSON file") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno}): {exc.msg}") from None
        return cls.from_dict(data, source=str(p))

    @classmethod
    def resolve(cls, path: str | Path | None) -> Calibration:
        """``load(path)``, or the shipped default when ``path`` is None (``SimConfig.calibration_path``)."""
        return cls.load(path) if path else cls.default()

    @classmethod
    def default(cls) -> Calibration:
        """The shipped default :data:`DEFAULT_CALIBRATION`: Qwen3-30B-A3B on H20-3e, derived by
        roofline (see its provenance)."""
        ref = resources.files("envs.sim").joinpath("calibrations", DEFAULT_CALIBRATION)
        with resources.as_file(ref) as p:
            return cls.load(p)
