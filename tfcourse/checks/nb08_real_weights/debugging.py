"""Notebook 08's visible cases of debugging a model: ``first_divergent_layer`` on pairs of tiny
LlamaDecoders (``probes.divergence_model``) with a bug at a known block, where the answer is known
by construction, and the optional ``attention_rollout`` against a product written with
``torch.linalg`` (exercises 4-5). They register after cases.py's exercises (this module imports
it), as in the notebook.
"""

from __future__ import annotations

import torch

from ..call import Call, Instance, Step
from ..case import Case, Judge, fmt_dtype
from . import probes
from .cases import NOTEBOOK, PROBES, make_case
from .mistakes import HINTS

__all__ = ["DIVERGENCE_IDS", "divergence_case", "rollout_oracle"]


# ---------------------------------------------------------------------------------------------
# first_divergent_layer
# ---------------------------------------------------------------------------------------------
DIVERGENCE_IDS = torch.tensor([[5, 5, 5, 5, 5, 5], [3, 17, 8, 29, 1, 12]])  # row 0: one token repeated


def divergence_case(title: str, expected: int | None, model_b: dict, *, model_a: dict | None = None,
                    atol: float | None = None, part: str = "core", ids: torch.Tensor = DIVERGENCE_IDS,
                    state: bool = False, seed: int = 11) -> Case:
    a_kwargs = {"seed": seed, **(model_a or {})}
    b_kwargs = {"seed": seed, **model_b}
    a = Instance(PROBES + "divergence_model", kwargs=a_kwargs, key="a")
    b = Instance(PROBES + "divergence_model", kwargs=b_kwargs, key="b")
    kwargs = {} if atol is None else {"atol": atol}
    steps = (Step("", attribute=True),) + ((Step("probe_state", on="a"), Step("probe_state", on="b")) if state else ())
    call = Call("first_divergent_layer", (a, b, ids), kwargs, steps=steps)

    def judge(j: Judge) -> None:
        o = j.outcomes[0]
        if o.kind == "error":
            j.values(0)
        if o.kind == "bad_type":
            j.fail(f"returned {o.type_name}; expected an int or None")
        got = o.tensors[0]
        if got.dim() == 0 and not got.is_floating_point() and got.dtype != torch.bool:
            answer: int | None | str = int(got)
        elif got.shape == (0,) and got.dtype == torch.float64:
            answer = None
        else:
            answer = f"a {fmt_dtype(got.dtype)} value of shape {tuple(got.shape)}"
        if isinstance(answer, str):
            j.fail(f"returned {answer}; expected a Python int (a block index) or None",
                   hint="return a Python int (int(i)) or None, not a tensor or a float")
        if answer != expected:
            j.fail(f"returned {answer}; expected {expected}", hint=lambda: j.mistake_hint())
        if state:
            for name, kw, t in (("model_a", a_kwargs, o.tensors[1]), ("model_b", b_kwargs, o.tensors[2])):
                want = probes._state_numbers(probes.divergence_model(**kw))
                if int(t[0]) != int(want[0]):
                    j.fail(f"{name} has {int(t[0])} forward hook(s) left after the call; expected {int(want[0])}",
                           hint=lambda: j.mistake_hint())
                if bool(t[1]) != bool(want[1]):
                    j.fail(f"{name}.training is {bool(t[1])} after the call; it was {bool(want[1])}",
                           hint=lambda: j.mistake_hint())
                if not torch.isclose(t[2], want[2], rtol=1e-12, atol=0):
                    j.fail(f"{name}'s parameters changed during the call (Σ|p| {float(t[2]):.9g}, was "
                           f"{float(want[2]):.9g})")

    return make_case("first_divergent_layer", title, [call], judge, part=part)


def divergence_errors_case() -> Case:
    a = Instance(PROBES + "divergence_model", kwargs={"seed": 11})
    b = Instance(PROBES + "divergence_model", kwargs={"seed": 11, "num_layers": 3})
    call = Call("first_divergent_layer", (a, b, DIVERGENCE_IDS), steps=(Step("", attribute=True),))

    def judge(j: Judge) -> None:
        o = j.outcomes[0]
        j.require(o.kind == "error" and o.error_type == "ValueError",
                  f"models with 4 and 3 blocks: {'raised ' + o.error_line() if o.kind == 'error' else 'nothing was raised'}"
                  "; expected ValueError", hint=HINTS["no_count_check"])

    return make_case("first_divergent_layer", "ValueError when the models have different numbers of blocks", [call],
                     judge, part="validation")


# ---------------------------------------------------------------------------------------------
# attention_rollout
# ---------------------------------------------------------------------------------------------
def rollout_oracle(attentions: list[torch.Tensor]) -> torch.Tensor:
    """Â_L · … · Â_1 (float64), with Â = rows-normalised (0.5·mean_h A + 0.5·I), by torch.linalg.multi_dot
    per batch element."""
    mats = []
    for a in attentions:
        m = a.double().mean(dim=1)
        m = 0.5 * m + 0.5 * torch.eye(m.size(-1), dtype=torch.float64)
        mats.append(m / m.sum(-1, keepdim=True))
    b = mats[0].size(0)
    return torch.stack([torch.linalg.multi_dot([m[i] for m in reversed(mats)]) if len(mats) > 1 else mats[0][i]
                        for i in range(b)])


def rollout_case(seed: int, layers: int, b: int, h: int, t: int, dtype: torch.dtype) -> Case:
    g = torch.Generator().manual_seed(seed)
    atts = [torch.softmax(torch.randn(b, h, t, t, generator=g, dtype=torch.float64) * 2, dim=-1).to(dtype)
            for _ in range(layers)]
    want = rollout_oracle(atts)

    def judge(j: Judge) -> None:
        got = j.tensor(shape=(b, t, t), dtype=dtype)
        j.close(got, want, oracle="Â_L···Â_1", tol_dtype=dtype,
                **({"atol": 1e-12, "rtol": 1e-9} if dtype == torch.float64 else {}))

    return make_case("attention_rollout", f"L = {layers} layers of (B, H, T, T) = ({b}, {h}, {t}, {t}) {fmt_dtype(dtype)}",
                     [Call("attention_rollout", (atts,))], judge, seed=seed)


def rollout_empty_case() -> Case:
    def judge(j: Judge) -> None:
        o = j.outcomes[0]
        j.require(o.kind == "error" and o.error_type == "ValueError",
                  f"an empty list: {'raised ' + o.error_line() if o.kind == 'error' else 'nothing was raised'}; "
                  "expected ValueError", hint="check `if not attentions: raise ValueError(...)` first")

    return make_case("attention_rollout", "ValueError for an empty list", [Call("attention_rollout", ([],))], judge)


@NOTEBOOK.exercise("first_divergent_layer", parts=("core", "edges", "validation"))
def _first_divergent_layer_cases() -> list[Case]:
    """Check ``first_divergent_layer(model_a, model_b, input_ids, atol=1e-4) -> int | None``.

    part: "core" (bugs at known blocks, equal models, differences below atol, only atol decides)
    , "edges" (NaN, a bug after the last block, a bug in the embedding, models left as found) or
    "validation" (the ValueError for different block counts); None: all."""
    return [
        divergence_case("a perturbed FFN at block 1 of 4 (both sequences differ from there on)", 1,
                        {"bug": "ffn", "layer": 1, "size": 0.5}),
        divergence_case("a wrong attention scale at block 2 of 4: only the SECOND sequence differs (the first "
                        "repeats one token)", 2, {"bug": "scale", "layer": 2, "size": 1.0}),
        divergence_case("two equal models: None", None, {}),
        divergence_case("a perturbation that stays below atol = 1e-4: None", None,
                        {"bug": "ffn", "layer": 0, "size": 1e-7}),
        divergence_case("atol = 1e-7, block 3's output 2e-6 larger in relative terms (about 1e-5 absolute): "
                        "only atol decides", 3, {"bug": "output_scale", "layer": 3, "size": 2e-6}, atol=1e-7),
        divergence_case("NaN produced at block 2 (in model_b only; models in training mode; hooks, training "
                        "flags and parameters left as they were)", 2, {"bug": "nan", "layer": 2, "training": True},
                        model_a={"training": True}, part="edges", state=True),
        divergence_case("NaN in BOTH models from block 1 on: NaN counts as a difference", 1,
                        {"bug": "nan", "layer": 1}, model_a={"bug": "nan", "layer": 1}, part="edges"),
        divergence_case("a bug in final_norm only (after the last block): None", None,
                        {"bug": "final_norm", "size": 0.5}, part="edges", state=True),
        divergence_case("a perturbed embedding: block 0", 0, {"bug": "embedding", "size": 0.5}, part="edges",
                        state=True),
        divergence_errors_case(),
    ]


@NOTEBOOK.exercise("attention_rollout")
def _attention_rollout_cases() -> list[Case]:
    """Check ``attention_rollout(attentions) -> (B, T, T)`` (optional, 0 points)."""
    return [rollout_case(41, 3, 2, 4, 5, torch.float64), rollout_case(42, 2, 1, 3, 6, torch.float32),
            rollout_case(43, 1, 2, 2, 4, torch.float64), rollout_empty_case()]
