"""`kuota serve`: run kuota's long-lived components in one process until SIGTERM or SIGINT.

Each component is an object with a `start()` and a `stop()` coroutine, made from the command's options by the
factory registered under its name in COMPONENTS. Components start in the order given and stop in reverse; a
component whose factory is None is not built yet. To add one, write its class next to WebhookComponent (or in its
own package) and put its factory in COMPONENTS.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Protocol

import orjson
import structlog
import typer

from kuota.components import StartError, job_kinds
from kuota.runtime import Runtime
from queues.heap import freeze_what_is_alive, tune_collector
from quota.config import QuotaConfig
from quota.duration import parse_duration_ms
from quota.loader import ConfigError, load_config_file
from webhooks.server import DEFAULT_PORT, WebhookServer
from webhooks.state import DEFAULT_SERVICE_ACCOUNT, WebhookState
from webhooks.tls import ReloadingTLS
from workloads.registry import REGISTRY

LOOP_SWITCH_INTERVAL_S = 0.001
"""How long a thread may hold the interpreter before the event loop's turn (see WebhookComponent)."""


@dataclass(frozen=True)
class ServeOptions:
    config: Path | None
    tls_cert: Path | None
    tls_key: Path | None
    webhook_host: str
    webhook_port: int
    service_account_username: str
    cluster: str = "kube"
    kubeconfig: Path | None = None
    database_url: str | None = None
    lease_name: str = "kuota-controller"
    lease_namespace: str = "kuota-system"
    lease_duration: int = 15
    config_map: str | None = None
    kube_qps: float = 50.0
    kube_burst: int = 100
    requeue_backoff_ms: int = 10_000
    admin_host: str = "0.0.0.0"
    admin_port: int = 8080
    admin_token_file: Path | None = None
    admin_tls_cert: Path | None = None
    admin_tls_key: Path | None = None
    kinds: tuple[str, ...] | None = None
    """--kinds; None: the quota file's jobKinds."""


class LogLevel(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class Component(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class WebhookComponent:
    """The admission webhooks for batch/v1 Jobs, over TLS."""

    def __init__(self, options: ServeOptions, runtime: Runtime | None = None) -> None:
        """Reads the quota file and the TLS files now, so that a bad one stops `serve` before anything starts."""
        flags = (("--config", options.config), ("--tls-cert", options.tls_cert), ("--tls-key", options.tls_key))
        missing = [flag for flag, value in flags if value is None]
        if missing or options.config is None or options.tls_cert is None or options.tls_key is None:
            raise StartError(f"the webhook component needs {', '.join(missing)}")
        try:
            config = load_config_file(options.config)
            state = WebhookState(
                config,
                service_account=options.service_account_username,
                config_path=options.config,
                kinds=job_kinds(options.kinds, config),
            )
        except ConfigError as exc:
            raise StartError(exc.render()) from None
        try:
            tls = ReloadingTLS(options.tls_cert, options.tls_key)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            raise StartError(f"cannot load the TLS certificate and key: {exc}") from None
        self.address = f"{options.webhook_host}:{options.webhook_port}"
        # Large reviews are parsed by a thread; while it holds the interpreter, every wake-up of the event loop
        # (a probe's read, its TLS record, its answer) waits up to the switch interval for it, 5 ms by default:
        # a probe needing several wake-ups queued 50-100 ms behind a flood. At 1 ms the loop gets its turn sooner.
        sys.setswitchinterval(LOOP_SWITCH_INTERVAL_S)
        self.server = WebhookServer(
            state, tls, host=options.webhook_host, port=options.webhook_port, observe=_webhook_observer()
        )

    async def start(self) -> None:
        try:
            await self.server.start()
        except OSError as exc:
            raise StartError(f"cannot listen on {self.address}: {exc}") from None

    async def stop(self) -> None:
        await self.server.stop()


ComponentFactory = Callable[[ServeOptions, Runtime], Component]


def _optional(module: str, name: str, error: str | None = None) -> ComponentFactory | None:
    """A factory imported only when used (keeps `kuota --help` fast); None while the module is not in this build.

    `error` names the module's own "cannot start" exception (a package below kuota cannot raise kuota's
    StartError); it is turned into a StartError, when building or starting, so that it ends `serve` with its
    message and exit code 2 rather than a traceback."""
    if importlib.util.find_spec(module) is None:
        return None

    def factory(options: ServeOptions, runtime: Runtime) -> Component:
        loaded = importlib.import_module(module)
        failure: type[Exception] = getattr(loaded, error) if error else StartError
        try:
            made: Component = getattr(loaded, name)(options, runtime)
        except failure as exc:
            raise StartError(str(exc)) from None
        return made if failure is StartError else _StartErrors(made, failure)

    return factory


class _StartErrors:
    """A component whose own start error becomes serve's StartError."""

    def __init__(self, component: Component, failure: type[Exception]) -> None:
        self.component, self.failure = component, failure

    async def start(self) -> None:
        try:
            await self.component.start()
        except self.failure as exc:
            raise StartError(str(exc)) from None

    async def stop(self) -> None:
        await self.component.stop()


if TYPE_CHECKING:
    # The factories of COMPONENTS are found by name when used; here mypy checks that each takes what serve gives
    # it (ServeOptions and the Runtime, through the Protocols their packages declare) and makes a Component.
    from admin.component import make_admin_component
    from kuota.components.controller import make_controller_component

    _FACTORIES: tuple[ComponentFactory, ...] = (WebhookComponent, make_controller_component, make_admin_component)

COMPONENTS: dict[str, ComponentFactory | None] = {
    "webhook": WebhookComponent,
    "controller": _optional("kuota.components.controller", "make_controller_component"),
    "admin": _optional("admin.component", "make_admin_component", "AdminStartError"),
}


def register(app: typer.Typer) -> None:
    app.command(name="serve")(serve)


def serve(
    components: Annotated[
        str | None,
        typer.Option("--components", help="Comma list of webhook, controller, admin (default: all three)."),
    ] = None,
    config: Annotated[Path | None, typer.Option("--config", help="The team-quota file (reloaded on change).")] = None,
    tls_cert: Annotated[Path | None, typer.Option("--tls-cert", help="PEM serving certificate (reloaded).")] = None,
    tls_key: Annotated[Path | None, typer.Option("--tls-key", help="PEM private key (reloaded).")] = None,
    webhook_port: Annotated[int, typer.Option("--webhook-port", min=0, max=65535)] = DEFAULT_PORT,
    webhook_host: Annotated[str, typer.Option("--webhook-host")] = "0.0.0.0",
    service_account_username: Annotated[
        str,
        typer.Option("--service-account-username", help="Username kuota's own requests arrive with."),
    ] = DEFAULT_SERVICE_ACCOUNT,
    cluster: Annotated[str, typer.Option("--cluster", help="kube, or sim: a simulated cluster in real time.")] = "kube",
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="Default: in-cluster, else ~/.kube.")] = None,
    database_url: Annotated[
        str | None, typer.Option("--database-url", help="Ledger database (default KUOTA_DATABASE_URL, else SQLite).")
    ] = None,
    lease_name: Annotated[str, typer.Option("--lease-name")] = "kuota-controller",
    lease_namespace: Annotated[str, typer.Option("--lease-namespace")] = "kuota-system",
    lease_duration: Annotated[int, typer.Option("--lease-duration", min=2, help="Seconds.")] = 15,
    config_map: Annotated[
        str | None, typer.Option("--config-map", help="NAMESPACE/NAME of a ConfigMap holding the quota file.")
    ] = None,
    kube_qps: Annotated[float, typer.Option("--kube-qps", min=0.1)] = 50.0,
    kube_burst: Annotated[int, typer.Option("--kube-burst", min=1)] = 100,
    requeue_backoff: Annotated[
        str,
        typer.Option(
            "--requeue-backoff",
            help="First wait before a preempted Job may be admitted again; doubles with each eviction, up to 10 min.",
        ),
    ] = "10s",
    admin_host: Annotated[str, typer.Option("--admin-host")] = "0.0.0.0",
    admin_port: Annotated[int, typer.Option("--admin-port", min=0, max=65535)] = 8080,
    admin_tokens: Annotated[Path | None, typer.Option("--admin-tokens", help="Bearer tokens and roles.")] = None,
    admin_tls_cert: Annotated[Path | None, typer.Option("--admin-tls-cert")] = None,
    admin_tls_key: Annotated[Path | None, typer.Option("--admin-tls-key")] = None,
    log_level: Annotated[
        LogLevel,
        typer.Option("--log-level", case_sensitive=False, help="Least severe log line written (JSON on stderr)."),
    ] = LogLevel.info,
    kinds: Annotated[
        str | None,
        typer.Option(
            "--kinds",
            help=f"Comma-separated job kinds to queue (default: the quota file's jobKinds, else Job); "
            f"known: {', '.join(REGISTRY.names())}.",
        ),
    ] = None,
) -> None:
    """Run kuota's components until SIGTERM or SIGINT, then finish what is in flight and exit."""
    names = _select(components)
    try:
        backoff_ms = parse_duration_ms(requeue_backoff)
    except ValueError as exc:
        _fail(f"--requeue-backoff: {exc}")
    options = ServeOptions(
        config, tls_cert, tls_key, webhook_host, webhook_port, service_account_username,
        cluster=cluster, kubeconfig=kubeconfig, database_url=database_url, lease_name=lease_name,
        lease_namespace=lease_namespace, lease_duration=lease_duration, config_map=config_map,
        kube_qps=kube_qps, kube_burst=kube_burst, requeue_backoff_ms=backoff_ms, admin_host=admin_host,
        admin_port=admin_port,
        admin_token_file=admin_tokens, admin_tls_cert=admin_tls_cert, admin_tls_key=admin_tls_key,
        kinds=tuple(part.strip() for part in kinds.split(",")) if kinds is not None else None,
    )  # fmt: skip
    try:
        runtime = _runtime(config)
        job_kinds(options.kinds, runtime.config)  # an unknown kind stops serve before anything starts
        built = [_factory(name)(options, runtime) for name in names]
    except StartError as exc:
        _fail(str(exc))
    _configure_logging(logging.getLevelNamesMapping()[log_level.value.upper()])
    try:
        _run_loop(_run(built, runtime))
    except StartError as exc:
        _fail(str(exc))


def _runtime(config: Path | None) -> Runtime:
    """The one Runtime every component shares; without a file the quota comes later (e.g. from a ConfigMap)."""
    if config is None:
        return Runtime(QuotaConfig(), "")
    try:
        return Runtime.from_file(config)
    except ConfigError as exc:
        raise StartError(exc.render()) from None
    except OSError as exc:
        raise StartError(f"cannot read {config}: {exc}") from None


def _select(components: str | None) -> list[str]:
    if components is None:
        names = list(COMPONENTS)
        missing = [name for name in names if COMPONENTS[name] is None]
        if missing:
            sys.stderr.write(
                f"kuota serve: {', '.join(missing)} not available yet in this build; "
                f"only {', '.join(n for n in names if n not in missing)} runs\n"
            )
        return [name for name in names if name not in missing]
    names = [part.strip() for part in components.split(",") if part.strip()]
    unknown = [name for name in names if name not in COMPONENTS]
    if unknown or not names:
        _fail(f"--components takes a comma list of {', '.join(COMPONENTS)} (got {components!r})")
    missing = [name for name in names if COMPONENTS[name] is None]
    if missing:
        _fail(f"{', '.join(missing)}: not available yet in this build (available: {', '.join(_available())})")
    return list(dict.fromkeys(names))


def _available() -> list[str]:
    return [name for name, factory in COMPONENTS.items() if factory is not None]


def _factory(name: str) -> ComponentFactory:
    factory = COMPONENTS[name]
    assert factory is not None
    return factory


def _fail(message: str) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(2)


async def _run(components: list[Component], runtime: Runtime | None = None) -> None:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    fatal: list[str] = []
    if runtime is not None:

        def on_fatal(reason: str) -> None:
            fatal.append(reason)
            stopping.set()

        runtime.on_fatal = on_fatal
    started: list[Component] = []
    tune_collector()
    try:
        for component in components:
            await component.start()
            started.append(component)
        freeze_what_is_alive()  # what start-up built (modules, the quota file, the app) lives as long as serve
        await stopping.wait()
    finally:
        for component in reversed(started):
            await component.stop()
    if fatal:
        raise StartError(fatal[0])


def _run_loop(main: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def _configure_logging(level: int = logging.INFO) -> None:
    """JSON lines on stderr, one per event; stdout stays free for commands' output."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.dict_tracebacks,
            structlog.processors.JSONRenderer(serializer=orjson.dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.BytesLoggerFactory(sys.stderr.buffer),
        cache_logger_on_first_use=True,
    )
    # Libraries and a few modules log through the standard library (aiohttp's access and server errors, the
    # admin API): the same JSON lines, at the same level, tracebacks as JSON too.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=structlog.processors.JSONRenderer(),
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.dict_tracebacks,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)


def _webhook_observer() -> Callable[[str, float], None] | None:
    """Webhook latency into the admin component's /metrics, when admin ships alongside."""
    try:
        from admin.metrics import observe_webhook
    except ImportError:  # pragma: no cover
        return None
    return observe_webhook
