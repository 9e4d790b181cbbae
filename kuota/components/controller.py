"""The controller component of `kuota serve`: the ledger, the Lease, and the scheduling loop while leading.

Every replica opens the ledger (running the schema migrations first) and campaigns for the Lease; the one that
holds it rebuilds the controller from the cluster and the ledger (clusters/kube/term.py) and puts it in the shared
Runtime, where the admin component finds it. Losing the Lease (or shutting down) stops the loop before anything
else, so two replicas never decide at once; shutting down then releases the Lease and flushes the ledger.
The quota file is watched (a file, or a ConfigMap through the API) and applied through `Runtime.apply_config`;
a change that does not load, or would strand running work, is logged and reported as an Event, and the old one
stays in force.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config

from accounting.database import DatabaseURLError, resolve_database_url
from accounting.ledger import Ledger
from accounting.migrate import upgrade_async
from clusters.kube.api import KubeApi, NotFound
from clusters.kube.events import EventRecorder
from clusters.kube.leader import LeaseElector
from clusters.kube.term import LeaderTerm
from kuota.components import StartError, job_kinds
from kuota.runtime import Runtime
from queues.journal import Journal
from queues.loop import wall_clock_ms
from queues.manager import ReloadRejected
from queues.tasks import BackgroundTasks
from quota.loader import ConfigError
from webhooks.files import file_signature

if TYPE_CHECKING:  # at run time imported only where `--cluster sim` uses it (_start_sim)
    from kuota.components.sim import RealTimeSimulation

log = structlog.get_logger("kuota.controller")

CONFIG_POLL_S = 2.0
#: On the leader's own pod while it leads; config/deploy's admin Service selects it.
LEADER_LABEL = "kuota.dev/leader"
CONFIG_MAP_KEYS = ("quota.yaml", "config.yaml")


class ControllerOptions(Protocol):
    """The options of `kuota serve` the controller component reads (read-only: serve's are frozen)."""

    @property
    def config(self) -> Path | None: ...

    @property
    def cluster(self) -> str: ...

    @property
    def kubeconfig(self) -> Path | None: ...

    @property
    def database_url(self) -> str | None: ...

    @property
    def lease_name(self) -> str: ...

    @property
    def lease_namespace(self) -> str: ...

    @property
    def lease_duration(self) -> int: ...

    @property
    def config_map(self) -> str | None: ...

    @property
    def kube_qps(self) -> float: ...

    @property
    def kube_burst(self) -> int: ...

    @property
    def requeue_backoff_ms(self) -> int: ...

    @property
    def kinds(self) -> tuple[str, ...] | None: ...


@dataclass(frozen=True)
class ConfigMapRef:
    namespace: str
    name: str

    @classmethod
    def parse(cls, text: str) -> ConfigMapRef:
        namespace, _, name = text.partition("/")
        if not namespace or not name or "/" in name:
            raise StartError(f"--config-map takes NAMESPACE/NAME (got {text!r})")
        return cls(namespace, name)


def identity() -> str:
    """Pod name (the hostname in a Pod), process id and a random suffix: no two candidates ever share one."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.getpid()}_{secrets.token_hex(3)}"


class ControllerComponent:
    def __init__(self, options: ControllerOptions, runtime: Runtime) -> None:
        if options.cluster not in ("kube", "sim"):
            raise StartError(f"--cluster takes kube or sim (got {options.cluster!r})")
        if options.config is None and options.config_map is None:
            raise StartError("the controller component needs --config FILE or --config-map NAMESPACE/NAME")
        if options.lease_duration < 2:
            raise StartError("--lease-duration must be at least 2 seconds")
        try:
            self.database_url = resolve_database_url(options.database_url)
        except DatabaseURLError as exc:
            raise StartError(str(exc)) from None
        self.options = options
        self.runtime = runtime
        self.config_map = ConfigMapRef.parse(options.config_map) if options.config_map else None
        self.identity = identity()
        self.ledger: Ledger | None = None
        self.api_client: client.ApiClient | None = None
        self.api: KubeApi | None = None
        self.elector: LeaseElector | None = None
        self.term: LeaderTerm | None = None
        self.sim: RealTimeSimulation | None = None
        self._tasks = BackgroundTasks("controller component")
        self._leading = asyncio.Lock()

    # -- life ---------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await upgrade_async(self.database_url)
        except Exception as exc:
            raise StartError(f"cannot migrate the ledger database: {exc}") from None
        self.ledger = Ledger(self.database_url)
        await self.ledger.start()
        self.runtime.ledger = self.ledger
        if self.options.cluster == "sim":
            await self._start_sim()
            return
        self.api_client = await self._api_client()
        self.api = KubeApi(self.api_client, qps=self.options.kube_qps, burst=self.options.kube_burst)
        if self.config_map is not None:
            await self._load_config_map(initial=True)
            self._tasks.start(self._watch_config_map(), "kuota-config-map")
        elif self.options.config is not None:
            self._tasks.start(self._watch_config_file(self.options.config), "kuota-config-file")
        await self._mark_leader(False)  # a restarted container's pod may still say it leads
        duration = self.options.lease_duration
        self.elector = LeaseElector(
            self.api,
            name=self.options.lease_name,
            namespace=self.options.lease_namespace,
            identity=self.identity,
            lease_duration_s=duration,
            renew_deadline_s=duration * 2 / 3,
            retry_period_s=max(0.2, duration / 5),
            on_started=self._lead,
            on_stopped=self._follow,
        )
        self._tasks.start(self.elector.run(), "kuota-lease")
        log.info(
            "controller_started",
            identity=self.identity,
            lease=f"{self.options.lease_namespace}/{self.options.lease_name}",
        )

    async def stop(self) -> None:
        if self.elector is not None:
            await self.elector.stop()  # stops the loop first, then releases the Lease
        if self.sim is not None:
            await self._follow()
        await self._tasks.close()
        if self.ledger is not None:
            await self.ledger.close()
        if self.api is not None:
            await self.api.close()
        if self.api_client is not None:
            await self.api_client.close()
        log.info("controller_stopped", identity=self.identity)

    async def kill(self) -> None:
        """Stop abruptly, as a crashed process would: no release, no flush (tests of fail-over)."""
        await self._tasks.close()
        if self.term is not None:
            term, self.term = self.term, None
            await term.stop()
        self.runtime.leader = False
        if self.api is not None:
            await self.api.close()
        if self.api_client is not None:
            await self.api_client.close()

    async def _api_client(self) -> client.ApiClient:
        configuration = client.Configuration()
        try:
            if self.options.kubeconfig is not None:
                await kube_config.load_kube_config(
                    config_file=str(self.options.kubeconfig), client_configuration=configuration
                )
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            else:
                await kube_config.load_kube_config(client_configuration=configuration)
        except Exception as exc:
            raise StartError(f"cannot load Kubernetes credentials: {exc}") from None
        return client.ApiClient(configuration)

    # -- leadership ---------------------------------------------------------------------------------------------

    async def _lead(self) -> None:
        async with self._leading:
            assert self.api is not None and self.elector is not None
            delay = 0.2
            while self.elector.leader and self.term is None:
                term = LeaderTerm(
                    self.api,
                    self.runtime.config,
                    self.ledger,
                    instance=self.identity,
                    extra_journals=_metrics(),
                    backoff_base_ms=self.options.requeue_backoff_ms,
                    kinds=job_kinds(self.options.kinds, self.runtime.config),
                )
                try:
                    await term.start()
                except Exception as exc:
                    log.error("leader_start_failed", error=str(exc)[:300], retry_in_s=delay)
                    await term.stop()
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 10.0)
                    continue
                if not self.elector.leader:  # lost the Lease while rebuilding
                    await term.stop()
                    return
                self.term = term
                if term.loop is not None:
                    term.loop.on_give_up = self._give_up
                self.runtime.controller, self.runtime.loop = term.controller, term.loop
                self.runtime.leader = True
                log.info("leading", identity=self.identity)
                await self._mark_leader(True)

    def _give_up(self, reason: str) -> None:
        """The scheduling loop cannot go on: holding the Lease would stop admissions cluster-wide, so the process
        stops (releasing the Lease on its way out) and exits non-zero for a restart or another replica."""
        log.error("controller_giving_up", identity=self.identity, reason=reason)
        self.runtime.leader = False
        if self.runtime.on_fatal is not None:
            self.runtime.on_fatal(f"the scheduling loop gave up: {reason}")
        elif self.elector is not None:  # not under `kuota serve` (tests): at least let another replica lead
            self._tasks.start(self.elector.stop(), "kuota-give-up")

    async def _follow(self) -> None:
        async with self._leading:
            self.runtime.leader = False
            if self.runtime.loop is not None:
                self.runtime.loop.active = False  # decide nothing more, even before the loop has stopped
            term, self.term = self.term, None
            if term is not None:
                await term.stop()
            if self.sim is not None:
                await self.sim.stop()
                self.sim = None
            self.runtime.controller, self.runtime.loop = None, None
            await self._mark_leader(False)

    async def _mark_leader(self, leading: bool) -> None:
        """Label this replica's own pod `kuota.dev/leader=true` while it leads (and remove the label otherwise):
        the admin Service selects that label, so operator actions, which only the leader can carry out, always
        reach it. Best effort: outside a pod (no POD_NAME and POD_NAMESPACE) there is nothing to label, and a
        failed patch is logged; the standby answers 503 for actions either way."""
        name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
        if self.api is None or not name or not namespace:
            return
        try:
            await self.api.label_pod(namespace, name, {LEADER_LABEL: "true" if leading else None})
        except Exception as exc:
            log.warning("leader_label_failed", pod=f"{namespace}/{name}", leading=leading, error=str(exc)[:300])

    # -- the quota file -----------------------------------------------------------------------------------------

    def _apply(self, text: str, source: str, involved: dict[str, str | None] | None) -> bool:
        try:
            self.runtime.apply_config(text, source)
        except (ConfigError, ReloadRejected) as exc:
            message = exc.render() if isinstance(exc, ConfigError) else str(exc)
            log.error("config_rejected", source=source, problem=message[:2000])
            if involved is not None and self.api is not None:
                recorder = EventRecorder(self.api, lambda _key: None, instance=self.identity)
                recorder.emit_on(
                    involved,
                    "ConfigRejected",
                    f"kept the previous quota file: {message}",
                    wall_clock_ms(),
                    warning=True,
                )
            return False
        log.info("config_applied", source=source)
        return True

    async def _watch_config_file(self, path: Path) -> None:
        signature = file_signature(path)
        while True:
            await asyncio.sleep(CONFIG_POLL_S)
            now = file_signature(path)
            if now == signature or now is None:
                continue
            signature = now
            try:
                text = await asyncio.to_thread(path.read_text, encoding="utf-8")
            except OSError as exc:
                log.error("config_unreadable", source=str(path), error=str(exc))
                continue
            if text != self.runtime.config_text:
                self._apply(text, str(path), None)

    async def _load_config_map(self, *, initial: bool = False) -> str | None:
        assert self.api is not None and self.config_map is not None
        ref = self.config_map
        try:
            body = await self.api.get_config_map(ref.namespace, ref.name)
        except Exception as exc:
            if initial:
                raise StartError(f"cannot read ConfigMap {ref.namespace}/{ref.name}: {exc}") from None
            if not isinstance(exc, NotFound):  # deleted: keep the quota file in force, quietly
                log.warning("config_map_unreadable", error=str(exc)[:200])
            return None
        data = body.get("data") or {}
        key = next((k for k in CONFIG_MAP_KEYS if k in data), None) or (next(iter(data)) if len(data) == 1 else None)
        if key is None:
            message = f"ConfigMap {ref.namespace}/{ref.name} has no key {' or '.join(CONFIG_MAP_KEYS)}"
            if initial:
                raise StartError(message)
            log.error("config_rejected", problem=message)
            return None
        text = str(data[key])
        if text != self.runtime.config_text:
            meta = body.get("metadata") or {}
            involved = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "namespace": ref.namespace,
                "name": ref.name,
                "uid": meta.get("uid"),
            }
            source = f"configmap/{ref.namespace}/{ref.name}"
            if not self._apply(text, source, involved) and initial and not self.runtime.config_text:
                raise StartError(f"the quota file in {source} does not load")
        return text

    async def _watch_config_map(self) -> None:
        # Polling a single small object is as cheap as a watch and needs no resourceVersion bookkeeping.
        while True:
            await asyncio.sleep(CONFIG_POLL_S)
            await self._load_config_map()

    # -- a local try-out without a cluster ----------------------------------------------------------------------

    async def _start_sim(self) -> None:
        from kuota.components.sim import RealTimeSimulation

        sim = RealTimeSimulation(
            self.runtime, backoff_base_ms=self.options.requeue_backoff_ms, extra_journals=_metrics()
        )
        self.sim = sim
        await sim.start()
        self.runtime.leader = True
        # The quota file is reloaded as on a cluster (a ConfigMap needs one, so --config-map is kube only).
        if self.options.config is not None:
            self._tasks.start(self._watch_config_file(self.options.config), "kuota-config-file")
        log.info("controller_started", cluster="sim")


def make_controller_component(options: ControllerOptions, runtime: Runtime) -> ControllerComponent:
    return ControllerComponent(options, runtime)


def _metrics() -> list[Journal]:
    """The Prometheus journal when the admin package is present (it serves /metrics)."""
    try:
        from admin.metrics import metrics_journal
    except ImportError:  # pragma: no cover - admin ships with kuota; kept optional for embedders
        return []
    return [metrics_journal()]
