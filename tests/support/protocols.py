"""Check that a class implements a Protocol method by method, not only by name.

A runtime ``isinstance`` against a ``@runtime_checkable`` Protocol only looks for attributes
with the right names: a method with the wrong parameters, a missing keyword-only marker, a
changed default or a sync method where a coroutine is expected all pass it. This compares
each method's signature (parameter names, kinds, defaults), its resolved type hints and
whether it is a coroutine function with the protocol's own declaration.
"""

from __future__ import annotations

import collections.abc
import contextlib
import inspect
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["protocol_methods", "signature_mismatches"]


def protocol_methods(protocol: type) -> list[str]:
    """The public methods a Protocol or an abstract class declares (its own and its bases',
    not object's)."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or klass is typing.Protocol or klass is typing.Generic:
            continue
        names.update(
            name
            for name, value in vars(klass).items()
            if not name.startswith("_") and inspect.isfunction(value)
        )
    return sorted(names)


def _hints(function: Callable[..., Any], localns: Mapping[str, Any]) -> dict[str, Any]:
    """The function's annotations resolved in its module, plus names only imported for typing."""
    module = sys.modules[function.__module__]
    return typing.get_type_hints(function, globalns=vars(module), localns=dict(localns))


def _describe(signature: inspect.Signature) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in signature.parameters.values() if p.name != "self"]


def signature_mismatches(
    implementation: type, protocol: type, *, localns: Mapping[str, Any] | None = None
) -> list[str]:
    """Every difference between the protocol's methods and the implementation's, as text.

    ``localns`` supplies names that either module imports only under ``TYPE_CHECKING``.
    An empty list means each method matches the protocol exactly.
    """
    localns = localns or {}
    problems: list[str] = []
    for name in protocol_methods(protocol):
        declared = getattr(protocol, name)
        actual = inspect.getattr_static(implementation, name, None)
        if not inspect.isfunction(actual):
            problems.append(f"{name}: not a plain method on {implementation.__name__}")
            continue
        if inspect.iscoroutinefunction(declared) != inspect.iscoroutinefunction(actual):
            problems.append(f"{name}: coroutine-ness differs")
        want, got = _describe(inspect.signature(declared)), _describe(inspect.signature(actual))
        if want != got:
            problems.append(f"{name}: parameters {got} != protocol's {want}")
        want_hints, got_hints = _hints(declared, localns), _hints(actual, localns)
        want_return, got_return = want_hints.pop("return", None), got_hints.pop("return", None)
        got_return = _as_context_manager(actual, got_return)
        if want_hints != got_hints:
            problems.append(f"{name}: parameter types {got_hints} != protocol's {want_hints}")
        problems.extend(
            f"{name}: returns {problem}"
            for problem in _return_mismatches(got_return, want_return, localns)
        )
    return problems


def _as_context_manager(function: Any, returns: Any) -> Any:
    """What an ``@asynccontextmanager`` method returns: its generator's ``AsyncIterator[T]``
    hint stands for ``AbstractAsyncContextManager[T]``."""
    wrapped = getattr(function, "__wrapped__", None)
    if not inspect.isasyncgenfunction(wrapped):
        return returns
    if typing.get_origin(returns) is not collections.abc.AsyncIterator:
        return returns
    return contextlib.AbstractAsyncContextManager[typing.get_args(returns)]  # type: ignore[misc]


def _union_members(hint: Any) -> tuple[Any, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def _return_mismatches(got: Any, want: Any, localns: Mapping[str, Any]) -> list[str]:
    """A return type may be narrower than the protocol's (covariance), never wider or other.

    Each member of the implementation's (union) return type must equal a member of the
    protocol's, be a subclass of one, or implement one that is itself a Protocol.
    """
    if got == want:
        return []
    problems: list[str] = []
    wanted = _union_members(want)
    for member in _union_members(got):
        if member in wanted:
            continue
        fits = False
        for candidate in wanted:
            if not (isinstance(member, type) and isinstance(candidate, type)):
                continue
            if getattr(candidate, "_is_protocol", False):
                nested = signature_mismatches(member, candidate, localns=localns)
                problems.extend(f"{member.__name__}.{problem}" for problem in nested)
                fits = not nested
            else:
                fits = issubclass(member, candidate)
            if fits:
                break
        if not fits:
            problems.append(f"{member!r}, which does not fit the protocol's {want!r}")
    return problems
