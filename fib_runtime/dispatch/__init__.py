"""The dispatcher: route a call to the best known solution for its inputs, never break the caller.

Entry points (stable; the adapters and ``fib_runtime.apply`` call these)::

    from fib_runtime.dispatch import dispatch, register_definition
    register_definition(defn)                     # a Definition the dataset does not have
    out = dispatch("rmsnorm_h4096", (x, w), lambda: original(x, w))

``dispatch(definition_name, inputs, fallback)``: ``inputs`` is a tuple in the Definition's input
order, ``fallback`` a zero-argument callable that runs the original. When the dispatcher is not
enabled (``FIB_ENABLE_APPLY`` unset and no :func:`enable` call) it only calls ``fallback()``.
"""

from __future__ import annotations


def dispatch(definition_name, inputs, fallback):
    """Run the chosen solution for ``inputs`` or ``fallback()`` (stub until the runtime lands)."""
    return fallback()


_REGISTERED = {}


def register_definition(defn) -> None:
    """Make a Definition (object or dict) known to the dispatcher for names the dataset lacks."""
    from ..schema import Definition

    if isinstance(defn, dict):
        defn = Definition.model_validate(defn)
    _REGISTERED[defn.name] = defn


__all__ = ["dispatch", "register_definition"]
