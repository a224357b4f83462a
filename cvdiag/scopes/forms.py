"""The forms a scope takes as a decorator: sync and async functions, sync and async generators.

A generator's scope spans its whole iteration, but its context is installed only while the
generator's own code runs: a context variable held across ``yield`` would leak into the consumer.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncGenerator, Callable, Generator
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol, TypeVar, cast


class Scoped(AbstractContextManager[Any], AbstractAsyncContextManager[Any], Protocol):
    """What a decorator form asks of a scope (``cvdiag.scopes.scope.Scope`` is one): a fresh
    copy per call, and the guarded steps a generator's form runs around each of its steps."""

    def _copy(self) -> Scoped: ...

    def _begin_guarded(self) -> bool: ...

    def _install_guarded(self) -> Any: ...

    def _uninstall(self, tokens: Any) -> None: ...

    def _end_guarded(self, exc: BaseException | None) -> None: ...


_F = TypeVar("_F", bound=Callable[..., Any])


def decorate(scope: Scoped, fn: _F) -> _F:
    """``scope`` as a decorator of a sync or async function, or a sync or async generator
    function: each call runs in a fresh copy of the scope, so calls may overlap."""
    if inspect.isasyncgenfunction(fn):
        wrapper: Callable[..., Any] = _async_generator(scope, fn)
    elif inspect.iscoroutinefunction(fn):
        wrapper = _coroutine(scope, fn)
    elif inspect.isgeneratorfunction(fn):
        wrapper = _generator(scope, fn)
    else:
        wrapper = _function(scope, fn)
    return cast(_F, functools.wraps(fn)(wrapper))


def _function(template: Scoped, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        with template._copy():
            return fn(*args, **kwargs)

    return call


def _coroutine(template: Scoped, fn: Callable[..., Any]) -> Callable[..., Any]:
    async def call(*args: Any, **kwargs: Any) -> Any:
        async with template._copy():
            return await fn(*args, **kwargs)

    return call


def _generator(template: Scoped, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The scope spans the whole iteration; its context is set only while the body runs.

    Setting a context variable inside a generator and holding it across ``yield`` would leak
    it into the consumer (and resetting it later could happen in another Context), so the
    context is installed around each step instead.
    """

    def call(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        scope = template._copy()
        inner = fn(*args, **kwargs)
        live = scope._begin_guarded()
        failure: BaseException | None = None
        try:
            sent: Any = None
            thrown: BaseException | None = None
            while True:
                tokens = scope._install_guarded() if live else None
                try:
                    item = inner.send(sent) if thrown is None else inner.throw(thrown)
                except StopIteration as stop:
                    return stop.value
                finally:
                    scope._uninstall(tokens)
                thrown = None
                try:
                    sent = yield item
                except GeneratorExit:
                    tokens = scope._install_guarded() if live else None
                    try:
                        inner.close()
                    finally:
                        scope._uninstall(tokens)
                    raise
                except BaseException as exc:
                    thrown, sent = exc, None
        except BaseException as exc:
            failure = exc
            raise
        finally:
            if live:
                scope._end_guarded(failure)

    return call


def _async_generator(template: Scoped, fn: Callable[..., Any]) -> Callable[..., Any]:
    """As ``_generator``: an agent turn that streams its answer."""

    async def call(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
        scope = template._copy()
        inner = fn(*args, **kwargs)
        live = scope._begin_guarded()
        failure: BaseException | None = None
        try:
            sent: Any = None
            thrown: BaseException | None = None
            while True:
                tokens = scope._install_guarded() if live else None
                try:
                    if thrown is None:
                        item = await inner.asend(sent)
                    else:
                        item = await inner.athrow(thrown)
                except StopAsyncIteration:
                    return
                finally:
                    scope._uninstall(tokens)
                thrown = None
                try:
                    sent = yield item
                except GeneratorExit:
                    tokens = scope._install_guarded() if live else None
                    try:
                        await inner.aclose()
                    finally:
                        scope._uninstall(tokens)
                    raise
                except BaseException as exc:
                    thrown, sent = exc, None
        except BaseException as exc:
            failure = exc
            raise
        finally:
            if live:
                scope._end_guarded(failure)

    return call
