// routes: after an interface plugin, adds the routes its config lists
// (`"routes": [{"dst": "192.168.0.0/16", "gw": "10.88.0.1"}]`) to CNI_IFNAME.
//
// The JavaScript twin of the Rust example `cargo xtask new-plugin` writes:
// same config, same result, same error codes. Built with componentize-js
// against the `interface-plugin` world of `wit/` (`cargo xtask polyglot`).
//
// jco's mapping of the contract: records are objects with camelCase fields,
// an `option` is a value or `undefined`, a variant is `{tag, val}`. An
// import's `err` arrives as a thrown error whose `payload` is the value; an
// export fails by throwing its `error` record.

import { containerNetns } from 'cni:plugin/network@0.2.2';

// CNI error codes (wit/types.wit).
const DECODING = 6;
const INVALID_CONFIG = 7;
const INTERNAL = 999;

function fail(code, msg) {
  return { code, msg, details: '' };
}

// A network error as the Rust SDK words it.
function describe(e) {
  const v = e && e.payload;
  if (!v || typeof v.tag !== 'string') return String(e);
  switch (v.tag) {
    case 'exists': return `already exists: ${v.val}`;
    case 'not-found': return `not found: ${v.val}`;
    case 'refused': return `refused by host policy: ${v.val}`;
    case 'invalid': return `invalid argument: ${v.val}`;
    default: return `kernel error ${v.val[0]}: ${v.val[1]}`;
  }
}

const is = (e, tag) => !!(e && e.payload && e.payload.tag === tag);

// The `routes` of the plugin's config: code 6 for text that is not JSON,
// code 7 for JSON of the wrong shape.
function routesOf(config) {
  let conf;
  try {
    conf = JSON.parse(config);
  } catch (e) {
    throw fail(DECODING, `failed to load netconf: ${e.message}`);
  }
  if (conf === null || typeof conf !== 'object' || Array.isArray(conf)) {
    throw fail(INVALID_CONFIG, 'failed to load netconf: the config is not an object');
  }
  const routes = conf.routes === undefined ? [] : conf.routes;
  if (!Array.isArray(routes)) {
    throw fail(INVALID_CONFIG, 'failed to load netconf: routes is not a list');
  }
  return routes.map((r) => {
    const ok = r !== null && typeof r === 'object' && typeof r.dst === 'string'
      && (r.gw === undefined || r.gw === null || typeof r.gw === 'string');
    if (!ok) {
      throw fail(INVALID_CONFIG, 'failed to load netconf: a route is an object with a string dst and gw');
    }
    return { dst: r.dst, gw: r.gw ?? undefined };
  });
}

const spec = (r, dev) => ({ dst: r.dst, gw: r.gw, dev });

function openContainer(req) {
  try {
    return containerNetns();
  } catch (e) {
    throw fail(INTERNAL, `failed to open netns ${JSON.stringify(req.netns ?? '')}: ${describe(e)}`);
  }
}

export const plugin = {
  add(req) {
    const routes = routesOf(req.config);
    if (req.prevResult === undefined) throw fail(INTERNAL, 'Required prevResult missing');
    const result = req.prevResult;
    const cont = openContainer(req);
    for (const r of routes) {
      try {
        cont.addRoute(spec(r, req.ifname));
      } catch (e) {
        if (!is(e, 'exists')) throw fail(INTERNAL, `adding route ${r.dst}: ${describe(e)}`);
      }
      result.routes.push(r);
    }
    return result;
  },

  del(req) {
    const routes = routesOf(req.config);
    let cont;
    try {
      cont = containerNetns();
    } catch (e) {
      if (is(e, 'not-found')) return;
      throw fail(INTERNAL, `failed to open the container network namespace: ${describe(e)}`);
    }
    for (const r of routes) {
      try {
        cont.delRoute(spec(r, req.ifname));
      } catch (e) {
        if (!is(e, 'not-found')) throw fail(INTERNAL, `deleting route ${r.dst}: ${describe(e)}`);
      }
    }
  },

  check(req) {
    const routes = routesOf(req.config);
    const cont = openContainer(req);
    let have;
    try {
      have = cont.listRoutes(req.ifname, undefined);
    } catch (e) {
      throw fail(INTERNAL, `listing routes: ${describe(e)}`);
    }
    const missing = routes.find((r) => !have.some((h) => h.dst === r.dst));
    if (missing) throw fail(INTERNAL, `route ${missing.dst} is missing`);
  },

  status(_config) {},

  gc(_config, _valid) {},
};
