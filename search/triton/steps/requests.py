"""What every step does with the requests of a dynamic batch: read text, check shapes, run all
rows at once and split the outputs back, one outcome per request. Pure (numpy): ``backend`` turns
the outcomes into Triton responses."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


class BadInput(ValueError):
    """The caller's data cannot be used (the message says why): INVALID_ARG, not a server fault."""


MIXED_UP = "outputs of another request"  # in MixedUp's message: the client reloads the ensemble's steps


class MixedUp(RuntimeError):
    """A step got inputs that cannot come from one request. Triton 2.51's Python backend does that
    once it has given up on a step that stalled for over a second: the step's late answer goes to
    the next batch of requests (docs/reliability.md, "A stalled step")."""


def texts(values: np.ndarray, name: str) -> list[str]:
    """A BYTES tensor's values as str, strictly UTF-8 (a replacement character would hide the error)."""
    flat = np.asarray(values, dtype=np.object_).reshape(-1)
    out = []
    for k, value in enumerate(flat):
        if not isinstance(value, bytes):
            out.append(str(value))
            continue
        try:
            out.append(value.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise BadInput(f"{name}: {where(k, len(flat), 'text')}not valid UTF-8 "
                           f"(byte {value[exc.start]:#04x} at offset {exc.start})") from None
    return out


def one_each(values: np.ndarray, n: int, name: str, per: str) -> np.ndarray:
    """``values`` flattened, refused unless it holds one value per ``per`` row."""
    flat = np.asarray(values).reshape(-1)
    if len(flat) != n:
        raise BadInput(f"{name} needs one value per {per} ({len(flat)} for {n})")
    return flat


def where(k: int, n: int, noun: str = "item") -> str:
    """The prefix naming row ``k`` of ``n`` in a message ("" when the request holds one)."""
    return f"{noun} {k + 1} of {n}: " if n > 1 else ""


def attempt(fn: Callable, *args):
    """``fn(*args)``, or the exception it raised: one request's failure is its outcome, not the batch's."""
    try:
        return fn(*args)
    except Exception as exc:
        return exc


def split(outputs: dict[str, np.ndarray], counts: Sequence[int]) -> list[dict[str, np.ndarray]]:
    """Outputs whose rows are the concatenated requests' -> one dict of rows per request."""
    ends = np.cumsum(counts, dtype=np.int64)
    if len(ends) and any(len(a) != ends[-1] for a in outputs.values()):
        raise ValueError(f"outputs have {[len(a) for a in outputs.values()]} rows for {int(ends[-1])}")
    return [{name: a[end - n:end] for name, a in outputs.items()} for n, end in zip(counts, ends)]


def run_grouped(parsed: Sequence, run: Callable[[list[list]], list[dict[str, np.ndarray]]]) -> list:
    """``parsed``: per request its rows (a list), or the exception that refused it. ``run`` gets the
    good requests' rows as one list per request, in one call (one tokenizer call for the batch), and
    returns one output dict per request (their shapes may differ: see ``tokens.widths``). A failing
    ``run`` fails those requests only."""
    good = [i for i, p in enumerate(parsed) if not isinstance(p, Exception)]
    outcomes = list(parsed)
    if not good:
        return outcomes
    result = attempt(run, [parsed[i] for i in good])
    for j, i in enumerate(good):
        outcomes[i] = result if isinstance(result, Exception) else result[j]
    return outcomes
