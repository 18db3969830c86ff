"""routes: after an interface plugin, adds the routes its config lists
(`"routes": [{"dst": "192.168.0.0/16", "gw": "10.88.0.1"}]`) to CNI_IFNAME.

The Python twin of the Rust example `cargo xtask new-plugin` writes: same
config, same result, same error codes. Built with componentize-py against
the `interface-plugin` world of `wit/` (`cargo xtask polyglot`).
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import network, types

# CNI error codes (wit/types.wit).
DECODING = 6
INVALID_CONFIG = 7
INTERNAL = 999


def fail(code, msg):
    return Err(types.Error(code=code, msg=msg, details=""))


def describe(e):
    """A network error as the Rust SDK words it."""
    v = e.value
    if isinstance(v, network.NetError_Exists):
        return f"already exists: {v.value}"
    if isinstance(v, network.NetError_NotFound):
        return f"not found: {v.value}"
    if isinstance(v, network.NetError_Refused):
        return f"refused by host policy: {v.value}"
    if isinstance(v, network.NetError_Invalid):
        return f"invalid argument: {v.value}"
    errno, msg = v.value
    return f"kernel error {errno}: {msg}"


def routes_of(config):
    """The `routes` of the plugin's config: code 6 for text that is not
    JSON, code 7 for JSON of the wrong shape."""
    try:
        conf = json.loads(config)
    except ValueError as e:
        raise fail(DECODING, f"failed to load netconf: {e}")
    if not isinstance(conf, dict):
        raise fail(INVALID_CONFIG, "failed to load netconf: the config is not an object")
    routes = conf.get("routes", [])
    if not isinstance(routes, list):
        raise fail(INVALID_CONFIG, "failed to load netconf: routes is not a list")
    out = []
    for r in routes:
        dst = r.get("dst") if isinstance(r, dict) else None
        gw = r.get("gw") if isinstance(r, dict) else None
        if not isinstance(dst, str) or not (gw is None or isinstance(gw, str)):
            raise fail(
                INVALID_CONFIG,
                "failed to load netconf: a route is an object with a string dst and gw",
            )
        out.append(
            types.Route(dst=dst, gw=gw, mtu=None, advmss=None, priority=None, table=None, scope=None)
        )
    return out


def spec(route, dev):
    return network.RouteSpec(
        dst=route.dst, gw=route.gw, dev=dev, src=None, mtu=None,
        advmss=None, priority=None, table=None, scope=None,
    )


def open_container(req):
    try:
        return network.container_netns()
    except Err as e:
        raise fail(INTERNAL, f"failed to open netns {json.dumps(req.netns or '')}: {describe(e)}")


class Plugin(exports.Plugin):
    def add(self, req):
        routes = routes_of(req.config)
        if req.prev_result is None:
            raise fail(INTERNAL, "Required prevResult missing")
        result = req.prev_result
        with open_container(req) as cont:
            for r in routes:
                try:
                    cont.add_route(spec(r, req.ifname))
                except Err as e:
                    if not isinstance(e.value, network.NetError_Exists):
                        raise fail(INTERNAL, f"adding route {r.dst}: {describe(e)}")
                result.routes.append(r)
        return result

    def del_(self, req):
        routes = routes_of(req.config)
        try:
            cont = network.container_netns()
        except Err as e:
            if isinstance(e.value, network.NetError_NotFound):
                return
            raise fail(INTERNAL, f"failed to open the container network namespace: {describe(e)}")
        with cont:
            for r in routes:
                try:
                    cont.del_route(spec(r, req.ifname))
                except Err as e:
                    if not isinstance(e.value, network.NetError_NotFound):
                        raise fail(INTERNAL, f"deleting route {r.dst}: {describe(e)}")

    def check(self, req):
        routes = routes_of(req.config)
        with open_container(req) as cont:
            try:
                have = cont.list_routes(req.ifname, None)
            except Err as e:
                raise fail(INTERNAL, f"listing routes: {describe(e)}")
        for r in routes:
            if not any(h.dst == r.dst for h in have):
                raise fail(INTERNAL, f"route {r.dst} is missing")

    def status(self, config):
        pass

    def gc(self, config, valid_attachments):
        pass
