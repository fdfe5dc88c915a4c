"""Lesson 09's exercise 2 judged (a checkpoint loader for any machine): why a file saved on a GPU did not load.

:func:`helpers.exercises.ex09_clinic.load_anywhere` loads the files :mod:`helpers.lab.gpu_checkpoints` writes; this
module names what went wrong: tensors sent back to ``cuda:0``, a training checkpoint dict loaded as a state_dict (or
a state_dict taken for one), keys whose wrappers' prefixes were not stripped, or stripped with ``str.lstrip`` (which
eats characters, not a prefix), and a model returned on the wrong device or without the saved weights.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from helpers.course.i18n import tr, tr_lazy
from helpers.exercises import NOT_WRITTEN, device_names, failed

LOAD_HINT = tr_lazy(
    "Four steps, section 7 of this notebook: read the file onto the CPU, weights only; take the model's state_dict "
    "out of a training checkpoint; strip the wrappers' prefixes from its keys; load it into a plain Tudui, then "
    "move the model to the device."
)
PREFIX_HINT = tr_lazy(
    "Strip every leading 'module.' and '_orig_mod.' from each key, in whichever order and however often they come "
    "(section 7); load_state_dict's error lists the keys that do not fit."
)


def _mangled(unexpected: str, saved_keys: list[str], plain_keys) -> str:
    """How the learner's code turned one of the file's keys into ``unexpected``, and why, if we can tell."""
    sources = [k for k in saved_keys if k.endswith(unexpected) and k != unexpected]
    if not sources:
        return ""
    source = min(sources, key=len)
    plain = next((p for p in plain_keys if source.endswith(p)), None)
    if plain:
        text = tr(
            " Your code turned the file's key {source!r} into {unexpected!r}; a plain Tudui's key is {plain!r}.",
            source=source,
            unexpected=unexpected,
            plain=plain,
        )
    else:
        text = tr(
            " Your code turned the file's key {source!r} into {unexpected!r}.", source=source, unexpected=unexpected
        )
    stripped = source
    for _ in range(3):
        stripped = stripped.lstrip("module.").lstrip("_orig_mod.")  # noqa: B005 (the mistake reproduced)
    for chars in ("module.", "_orig_mod."):
        if unexpected in (source.lstrip(chars), stripped):
            text += tr(
                " str.lstrip({chars!r}) strips any of the characters {letters} from the "
                "left, not the prefix {chars!r}: it ate {eaten!r}. Remove a prefix "
                "with str.removeprefix, or slice it off after a startswith test.",
                chars=chars,
                letters=" ".join(dict.fromkeys(chars)),
                eaten=source[: len(source) - len(unexpected)],
            )
            break
    return text


def load_error(error: Exception, what: str, training: bool, where: str, saved_keys=(), plain_keys=()):
    text = str(error)
    first = text.strip().splitlines()[0] if text.strip() else ""
    if isinstance(error, NotImplementedError) and not str(error):  # the starter, untouched
        return failed(NOT_WRITTEN)
    if "deserialize object on a CUDA device" in text:
        return failed(
            tr(
                "{where}, torch.load tried to put the tensors of {what} back on cuda:0, where they were saved.",
                where=where,
                what=what,
            ),
            tr(
                "torch.load puts each tensor back on the device it was saved from unless its map_location argument "
                "says otherwise (section 7)."
            ),
        )
    if isinstance(error, KeyError) and not training:
        return failed(
            tr(
                "{where}, your code raised KeyError: {error} for {what}: that file is the state_dict itself, not a "
                "training checkpoint dict.",
                where=where,
                error=error,
                what=what,
            ),
            tr(
                "A training checkpoint holds the state_dict under a key, a bare state_dict does not: look at what "
                "the file holds before taking it out."
            ),
        )
    if "Unexpected key" in text or "Missing key" in text:
        if training and ('"epoch"' in text or '"optimizer"' in text):
            return failed(
                tr(
                    "{where}, {what} holds the model's state_dict under 'model', beside 'optimizer' and 'epoch': "
                    "your code loaded the whole dict as a state_dict.",
                    where=where,
                    what=what,
                ),
                tr("Take the model's state_dict out of a training checkpoint (and only out of one)."),
            )
        odd = re.search(r'Unexpected key\(s\) in state_dict: "([^"]+)"', text)
        if odd:
            message = tr(
                "{where}, the keys of {what} did not fit a plain Tudui (unexpected key {key!r}, ...).",
                where=where,
                what=what,
                key=odd.group(1),
            )
            message += _mangled(odd.group(1), list(saved_keys), list(plain_keys))
        else:
            message = tr("{where}, the keys of {what} did not fit a plain Tudui.", where=where, what=what)
        return failed(message, tr(PREFIX_HINT))
    return failed(
        tr(
            "{where}, loading {what}, your code raised {error_type}: {error}",
            where=where,
            what=what,
            error_type=type(error).__name__,
            error=first,
        ),
        tr(LOAD_HINT),
    )


def load_result_problem(model, device, expected: dict, what: str, where: str):
    if isinstance(model, dict):
        return failed(
            tr(
                "{where}, you returned a dict for {what}: return the model with the weights loaded.",
                where=where,
                what=what,
            ),
            tr(LOAD_HINT),
        )
    if not isinstance(model, nn.Module) or isinstance(model, nn.parallel.DistributedDataParallel | nn.DataParallel):
        return failed(tr("Return a plain nn.Module (a Tudui), not {kind}.", kind=type(model).__name__), tr(LOAD_HINT))
    state = model.state_dict()
    if set(state) != set(expected):
        return failed(
            tr(
                "{where}, your model's keys for {what} are {keys}..., not a plain Tudui's.",
                where=where,
                what=what,
                keys=sorted(state)[:2],
            ),
            tr(PREFIX_HINT),
        )
    places = {v.device for v in state.values()}
    if places != {device}:
        moved = (
            tr(" load_state_dict copies values into the parameters where they are: it never moves the model.")
            if places == {torch.device("cpu")}
            else ""
        )
        return failed(
            tr(
                "{where}, asked for {device}, your model's tensors are on {places}.{moved}",
                where=where,
                device=device,
                places=device_names(places),
                moved=moved,
            ),
            tr(
                "Move the model to the device before returning it. (With load_state_dict(..., assign=True) the "
                "model takes the loaded tensors themselves, on the device torch.load put them.)"
            ),
        )
    if device.type != "meta" and not all(torch.equal(state[k].cpu(), v) for k, v in expected.items()):
        return failed(
            tr(
                "{where}, your model does not hold the saved weights of {what} (loading with strict=False skips "
                "every key that does not match, silently).",
                where=where,
                what=what,
            ),
            tr("Strip the prefixes and load with the default strict=True, which names any key that does not fit."),
        )
    return None
