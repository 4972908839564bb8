"""HTTP layer: a threading HTTP/1.1 server with keep-alive (Content-Length on every response, chunked
transfer only for followed logs), routing to the API and control layers, and the discovery documents the
kubernetes client and kubectl read. It can also restart as an apiserver process does (``restart``):
down (connections reset, then refused) while the cluster behind it — store, scheduler, kubelet — runs
on, then back with an authorizer that refuses everything for a few seconds while /readyz fails."""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from . import control, rbac
from .api import qbool
from .faults import RESETS, STORM_TEXT, error_for
from .errors import ApiError, bad_request, method_not_allowed, rbac_forbidden
from .resources import GROUPS, TYPES
from .util import dumps

log = logging.getLogger("k8s_emulator.server")
NOT_FOUND = ApiError(404, "NotFound", "the server could not find the requested resource", {})
PROTOBUF = "application/vnd.kubernetes.protobuf"
NO_PROTOBUF = ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - {PROTOBUF} "
                       "is not emulated (accepted media types include: application/json)", {})
SUB_VERBS = {"log": ("Pod", ["get"]), "eviction": ("Eviction", ["create"]), "binding": ("Binding", ["create"])}
HEALTH_PATHS = (["healthz"], ["readyz"], ["livez"])  # --authorization-always-allow-paths: never authorized
# /readyz (and /healthz) of an apiserver whose RBAC caches are not synced yet: 500, each check listed
NOT_READY = (b"[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]poststarthook/start-apiserver-admission-initializer ok\n"
             b"[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n"
             b"[-]poststarthook/scheduling/bootstrap-system-priority-classes failed: reason withheld\n"
             b"[+]shutdown ok\n")


def _non_resource(segs: list[str]) -> bool:
    """/version and the discovery documents (/api, /api/v1, /apis, /apis/<group>[/v1]): non-resource URLs."""
    return segs in (["version"], ["api"], ["api", "v1"]) or (segs[:1] == ["apis"] and len(segs) <= 3)


class TooManyRequests(Exception):
    """API Priority and Fairness refused the request: a plain-text 429, not a Status."""

    def __init__(self, retry_after: int):
        super().__init__("too many requests")
        self.retry_after = retry_after


def resource_list(group: str) -> dict:
    res = []
    for plural, t in TYPES.items():
        if t.group != group:
            continue
        res.append({"name": plural, "singularName": t.kind.lower(), "namespaced": t.namespaced, "kind": t.kind,
                    "verbs": ["create", "delete", "get", "list", "patch", "update"]})
        for sub in t.subresources:
            kind, verbs = SUB_VERBS.get(sub, (t.kind, ["get", "patch", "update"]))
            res.append({"name": f"{plural}/{sub}", "singularName": "", "namespaced": t.namespaced, "kind": kind,
                        "verbs": verbs, **({"group": "policy", "version": "v1"} if sub == "eviction" else {})})
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/v1" if group else "v1",
            "resources": res}


def group_doc(name: str) -> dict:
    gv = {"groupVersion": f"{name}/v1", "version": "v1"}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": [gv], "preferredVersion": gv}


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr, cluster, verbose=False):
        self.cluster, self.verbose = cluster, verbose
        self._connections: set = set()
        self._state = threading.Condition()
        self._phase = "serving"  # serving | down | back | stopped
        super().__init__(addr, Handler)

    # ------------------------------------------------------------ open connections (to reset them)
    def process_request(self, request, client_address):
        with self._state:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._state:
            self._connections.discard(request)
        super().shutdown_request(request)

    def _drop_connections(self):
        with self._state:
            open_now = list(self._connections)
        for sock in open_now:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                sock.shutdown(socket.SHUT_RDWR)  # wakes its handler, blocked reading the next request
            except OSError:
                pass

    # ------------------------------------------------------------ serving, through restarts
    def serve(self, poll_interval: float = 0.2):
        """serve_forever until ``stop()``; a restart in between ends one loop and starts the next."""
        while True:
            self.serve_forever(poll_interval=poll_interval)
            with self._state:
                self._state.wait_for(lambda: self._phase != "down")
                if self._phase == "stopped":
                    return
                self._phase = "serving"

    def stop(self):
        with self._state:
            serving, self._phase = self._phase == "serving", "stopped"
            self._state.notify_all()
        if serving:
            self.shutdown()

    def restart(self, down_s: float, forbidden_s: float) -> bool:
        """Go down now for ``down_s`` (open connections reset, new ones refused), then serve again with
        every resource request refused for ``forbidden_s`` (``faults.authorizer_starts``). False when a
        restart is under way already."""
        with self._state:
            if self._phase != "serving":
                return False
            self._phase = "down"
        threading.Thread(target=self._restart, args=(down_s, forbidden_s), name="apiserver-restart",
                         daemon=True).start()
        return True

    def _restart(self, down_s: float, forbidden_s: float):
        time.sleep(0.05)  # the restart request's own answer goes out first
        self.shutdown()  # the accept loop ends (serve() waits for the phase to change) ...
        self.socket.close()  # ... and the port refuses connections
        self._drop_connections()
        time.sleep(down_s)
        with self._state:
            if self._phase == "stopped":
                return
            self.socket = socket.socket(self.address_family, self.socket_type)
            self.server_bind()
            self.server_activate()
            self.cluster.faults.authorizer_starts(forbidden_s)
            self._phase = "back"
            self._state.notify_all()
        log.warning("apiserver back after %.1f s down; authorizer not ready for %.1f s", down_s, forbidden_s)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "k8s-emulator"
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid Nagle/delayed-ACK stalls

    def log_message(self, fmt, *args):
        if self.server.verbose:
            log.info("%s - %s", self.address_string(), fmt % args)

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def _read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(n) if n else b""
        if not data:
            return None
        if self.headers.get("Content-Type", "").startswith(PROTOBUF):
            return PROTOBUF  # kubectl's typed clients send protobuf; only a rules review does without its body
        try:
            return json.loads(data)
        except ValueError as exc:
            raise bad_request(f"couldn't get version/kind; json parse error: {exc}") from None

    def _send(self, code: int, body: bytes, ctype: str = "application/json", headers: dict | None = None):
        if getattr(self, "_swallow", False):  # an injected reset-after: handled, never answered
            return
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if getattr(self, "_cut", False):  # an injected cut: half the body, then a reset
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            time.sleep(0.05)  # let what was written arrive: a reset drops unsent bytes
            self._reset()
            return
        self.wfile.write(body)

    def _send_stream(self, head: bytes, items, tail: bytes, chunk_bytes: int = 256 * 1024):
        """A 200 list answer written as its items are produced (chunked transfer encoding), as an
        apiserver streams a collection from 1.33 on."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        parts, size, first = [head], len(head), True
        for raw in items:
            if not first:
                parts.append(b",")
            parts.append(raw)
            size, first = size + len(raw) + 1, False
            if size >= chunk_bytes:
                data = b"".join(parts)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                parts, size = [], 0
        data = b"".join([*parts, tail])
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))

    def _send_error(self, exc: ApiError):
        # as the apiserver's ErrorNegotiated: a Status with details.retryAfterSeconds > 0 sets Retry-After
        retry_after = (exc.details or {}).get("retryAfterSeconds")
        self._send(exc.code, dumps(exc.status()), headers={"Retry-After": str(retry_after)} if retry_after else None)

    def _reset(self):
        """Drop the connection with a TCP reset (SO_LINGER 0), no response."""
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    def _dispatch(self, method: str):
        try:
            parsed = urlsplit(self.path)
            q = {k: v[-1] for k, v in parse_qs(parsed.query, keep_blank_values=True).items()}
            body = self._read_body()
            if parsed.path.rstrip("/") == "/_emulator/restart" and method == "POST":
                return self._restart(body or {})
            if parsed.path.startswith("/_emulator/"):
                code, payload = control.handle(self.server.cluster, method, parsed.path, q, body)
                self._send(code, dumps(payload))
                return
            if body == PROTOBUF and "selfsubjectrulesreviews" not in parsed.path:
                raise NO_PROTOBUF
            fault = self.server.cluster.faults.take(method, parsed.path)
            if fault is None:
                self._api(method, [s for s in parsed.path.split("/") if s], q, body)
            elif fault[0] == "cut":
                self._cut = True
                try:
                    self._api(method, [s for s in parsed.path.split("/") if s], q, body)
                finally:
                    self._cut = False
            elif fault[0] in RESETS:
                if fault[0] == "reset-after":
                    self._swallow = True
                    try:
                        self._api(method, [s for s in parsed.path.split("/") if s], q, body)
                    except ApiError:
                        pass
                self._reset()
            else:
                raise error_for(fault[0], fault[1]["retry_after"], fault[1]["message"])
        except ApiError as exc:
            self._send_error(exc)
        except TooManyRequests as exc:  # APF's tooManyRequests: http.Error, plain text
            self._send(429, STORM_TEXT.encode(), "text/plain; charset=utf-8",
                       headers={"Retry-After": str(exc.retry_after), "X-Content-Type-Options": "nosniff"})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001 - a bug in the emulator answers 500, like an apiserver panic
            log.error("internal error on %s %s:\n%s", method, self.path, traceback.format_exc())
            self._send_error(ApiError(500, "InternalError", f"Internal error occurred: {exc}", {}))

    def _restart(self, body: dict):
        down_s, forbidden_s = body.get("down_s", 5), body.get("forbidden_s", 3)
        for value in (down_s, forbidden_s):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 600:
                raise bad_request("restart: down_s and forbidden_s are seconds between 0 and 600")
        if not self.server.restart(float(down_s), float(forbidden_s)):
            raise ApiError(409, "Conflict", "a restart is already under way")
        self.close_connection = True
        self._send(202, dumps({"down_s": down_s, "forbidden_s": forbidden_s}))

    def _starting(self, segs: list[str]):
        """While the authorizer is not ready: /readyz and /healthz fail, /livez passes, any other
        non-resource path is refused (resource requests: ``_authorize``)."""
        if segs == ["livez"]:
            return self._send(200, b"ok", "text/plain")
        if segs in (["readyz"], ["healthz"]):
            return self._send(500, NOT_READY + f"{segs[0]} check failed\n".encode(), "text/plain; charset=utf-8",
                              headers={"X-Content-Type-Options": "nosniff"})
        path = "/" + "/".join(segs)
        raise ApiError(403, "Forbidden", f'forbidden: User "system:anonymous" cannot get path "{path}"', {})

    def _api(self, method: str, segs: list[str], q: dict, body):
        cluster = self.server.cluster
        if cluster.faults.authorizer_starting() and (segs in HEALTH_PATHS or _non_resource(segs)):
            return self._starting(segs)
        if method == "GET" and segs in (["version"], ["api"], ["apis"], ["healthz"], ["readyz"], ["livez"]):
            if segs == ["version"]:
                return self._send(200, dumps(cluster.version()))
            if segs == ["api"]:
                return self._send(200, dumps({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": self.headers.get("Host", "127.0.0.1")}]}))
            if segs == ["apis"]:
                return self._send(200, dumps({"kind": "APIGroupList", "apiVersion": "v1",
                                              "groups": [group_doc(g) for g in (*GROUPS, rbac.REVIEW_GROUP) if g]}))
            return self._send(200, b"ok", "text/plain")
        if segs[:3] == ["apis", rbac.REVIEW_GROUP, "v1"]:
            return self._review(method, segs[3:], body)
        if method == "GET" and segs == ["apis", rbac.REVIEW_GROUP]:
            return self._send(200, dumps(group_doc(rbac.REVIEW_GROUP)))
        if segs[:2] == ["api", "v1"]:
            group, rest = "", segs[2:]
        elif len(segs) >= 3 and segs[0] == "apis" and segs[1] in GROUPS and segs[2] == "v1":
            group, rest = segs[1], segs[3:]
        elif method == "GET" and len(segs) == 2 and segs[0] == "apis" and segs[1] in GROUPS:
            return self._send(200, dumps(group_doc(segs[1])))
        else:
            raise NOT_FOUND
        if not rest:
            if method != "GET":
                raise method_not_allowed()
            return self._send(200, dumps(resource_list(group)))
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        rt = TYPES.get(rest[0])
        name, sub = (rest + [None, None])[1:3]
        if (rt is None or rt.group != group or len(rest) > 3 or (ns is not None and not rt.namespaced)
                or (sub is not None and sub not in rt.subresources) or (rt.namespaced and name and ns is None)):
            raise NOT_FOUND
        api, resource = cluster.api, rt.plural + (f"/{sub}" if sub else "")
        self._flow_control(method, q, resource, ns, name)
        self._authorize(method, q, rt, resource, ns, name)
        if method == "GET" and name is None:
            cluster.count("watch" if qbool(q, "watch") else "list", resource)
            faulted = getattr(self, "_cut", False) or getattr(self, "_swallow", False)
            lr = api.list(rt, ns, q, stream=not faulted)
            meta = {"resourceVersion": str(lr.rv), **({"continue": lr.cont} if lr.cont else {}),
                    **({"remainingItemCount": lr.remaining} if lr.remaining else {})}
            head = dumps({"kind": rt.kind + "List", "apiVersion": rt.api_version, "metadata": meta})
            if lr.streamed:
                return self._send_stream(head[:-1] + b',"items":[', lr.items, b"]}")
            return self._send(200, head[:-1] + b',"items":[' + b",".join(lr.items) + b"]}")
        if method == "GET":
            cluster.count("get", resource)
            return self._log(ns, name, q) if sub == "log" else self._send(200, api.current(rt, ns, name).raw())
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
        if verb is None or (rt.namespaced and ns is None):
            raise method_not_allowed()
        cluster.count(verb, resource)
        if method == "POST" and name is None:
            return self._send(201, api.create(rt, ns, body or {}).raw())
        if method == "POST" and sub in ("eviction", "binding"):
            return self._send(201, dumps((api.evict if sub == "eviction" else api.bind)(ns, name, body or {})))
        if method == "POST" or name is None or sub in ("log", "eviction", "binding"):
            raise method_not_allowed()
        if method == "DELETE":
            res = api.delete(rt, ns, name, body, q)
            return self._send(200, res.raw() if hasattr(res, "raw") else dumps(res))
        ctype = self.headers.get("Content-Type", "") if method == "PATCH" else None
        return self._send(200, api.update(rt, ns, name, body, sub, ctype).raw())

    @staticmethod
    def _verb(method: str, q: dict, name: str | None) -> str:
        return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method) or (
            "get" if name else "watch" if qbool(q, "watch") else "list")

    def _flow_control(self, method: str, q: dict, resource: str, ns: str | None, name: str | None):
        """An injected 429 storm (faults.py): API Priority and Fairness refuses before authorization."""
        storm = self.server.cluster.faults.storming(self._verb(method, q, name), resource, ns)
        if storm is not None:
            raise TooManyRequests(storm["retry_after"])

    def _authorize(self, method: str, q: dict, rt, resource: str, ns: str | None, name: str | None):
        """RBAC as far as tests need it (rbac.py): `forbidden` lists "<resource>[.<group>]" (every verb)
        or "<verb> <resource>[.<group>]" that answer 403; `rbac_rules`, when set, is the only thing
        allowed; an apiserver that has just restarted refuses everything until its authorizer is ready.
        Checked before the object is looked up."""
        settings = self.server.cluster.settings
        verb = self._verb(method, q, name)
        if self.server.cluster.faults.authorizer_starting():
            raise rbac_forbidden(verb, resource, rt.group, name, ns)
        if not settings.forbidden and settings.rbac_rules is None:
            return
        target = resource + (f".{rt.group}" if rt.group else "")
        if target in settings.forbidden or f"{verb} {target}" in settings.forbidden or (
                settings.rbac_rules is not None and not rbac.allows(settings.rbac_rules, verb, rt.group, resource, name)):
            raise rbac_forbidden(verb, resource, rt.group, name, ns)

    def _review(self, method: str, rest: list[str], body):
        """POST a SelfSubjectRulesReview / SelfSubjectAccessReview (nothing is stored); GET the
        group's resource list."""
        if method == "GET" and not rest:
            return self._send(200, dumps({"kind": "APIResourceList", "apiVersion": "v1",
                                          "groupVersion": f"{rbac.REVIEW_GROUP}/v1", "resources": [
                {"name": r, "singularName": "", "namespaced": False, "kind": k, "verbs": ["create"]}
                for r, k in zip(rbac.REVIEWS, ("SelfSubjectRulesReview", "SelfSubjectAccessReview"))]}))
        if len(rest) != 1 or rest[0] not in rbac.REVIEWS:
            raise NOT_FOUND
        if method != "POST":
            raise method_not_allowed()
        self.server.cluster.count("create", rest[0])
        # a protobuf rules review (kubectl auth can-i --list): its spec names only a namespace, and the
        # rules here are cluster-wide, so the answer does not depend on it
        return self._send(201, dumps(rbac.review(self.server.cluster, rest[0], None if body == PROTOBUF else body)))

    def _log(self, ns: str, name: str, q: dict):
        container, opts = self.server.cluster.api.log_source(ns, name, q)
        if container is None:
            return self._send(200, b"", "text/plain")
        if not opts.pop("follow", False):
            return self._send(200, container.log.read(**opts), "text/plain")
        # follow: a chunked stream until the container ends (or the client goes away)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        opts.pop("limit_bytes", None)
        try:
            for chunk in container.log.follow(**opts):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
