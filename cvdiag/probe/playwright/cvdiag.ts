// cvdiag's Playwright fixture: what the test saw, as CVDIAG v1 `probe` lines under its test id.
//
// Drop this file into your Playwright project (`python -m cvdiag.probe.playwright tests/cvdiag.ts`)
// and import `test` and `expect` from it instead of from "@playwright/test":
//
//     import { test, expect } from "./cvdiag";
//
// Each test attempt gets a test id (a UUIDv7; a retry gets a new one), sent as `x-test-id` with
// every request of its page and of its `request` fixture, recorded as an annotation
// (`cvdiag_test_id`) and as a `cvdiag-test-id: <id>` line of the test's output (the JUnit
// reporter keeps both). What the test saw is appended to `process.env.CVDIAG_PROBE_LOG`
// (default `cvdiag-probe.log`), one whole line per event, synchronously: a runner that dies keeps
// what it wrote. `cvdiag report backend.log cvdiag-probe.log --junit results.xml` joins them.
// Docs: docs/ci.md ("Playwright") and docs/envelope.md ("Written by the Playwright fixture").
// No dependency but @playwright/test; free text is scrubbed before it is written.

/// <reference lib="dom" />
// (The page's side below runs in the browser: its types, whatever the project's tsconfig says.)

import { test as base, expect } from "@playwright/test";
import type { APIRequestContext, BrowserContext, Page, Request, TestInfo } from "@playwright/test";
import { appendFileSync } from "node:fs";
import { randomBytes } from "node:crypto";

export { expect };

type Tier = "default" | "verbose" | "debug";
type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

export type CvdiagOptions = {
  /** A CSS selector of the page's answer container: its first text is `probe.dom.firsttoken`. */
  cvdiagTokenSelector: string | null;
  /** The tier the probe records at (`verbose` unless told otherwise). */
  cvdiagTier: Tier;
  /** The envelope's slug: `probe` unless you know the backend's. */
  cvdiagSlug: string;
};

export type CvdiagFixtures = {
  /** This attempt's test id, as sent in `x-test-id`. */
  cvdiagTestId: string;
  cvdiagProbe: Probe;
};

// --- ids ----------------------------------------------------------------------------------------

/** A UUIDv7: 48 bits of Unix milliseconds, the version and variant, 74 random bits. */
export function uuidv7(): string {
  const bytes = randomBytes(16);
  let ms = Date.now();
  for (let i = 5; i >= 0; i--) {
    bytes[i] = ms % 256;
    ms = Math.floor(ms / 256);
  }
  bytes[6] = (bytes[6] & 0x0f) | 0x70;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = bytes.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// --- scrubbing ----------------------------------------------------------------------------------
// The literal prefixes of cvdiag/scrubbing/vendors.py's token shapes (tests/probe/test_playwright.py
// checks every rule's example is redacted here): a prefix at a token boundary, then the token.

const PREFIXES = [
  "sk-", "sk_", "pk_", "rk_", "pk-", "rk-", "gsk_", "xai-", "pplx-", "r8_", "hf_", "api_org_", "lsv2_",
  "csk-", "nvapi-", "pcsk_", "fw_", "tgp_v1_", "pa-", "rpa_", "esecret_", "tvly-", "fc-", "e2b_",
  "jina_", "m0-", "bb_live_", "bb_test_", "sess-", "ak-", "as-", "AIza", "ya29.", "1//0", "GOCSPX-",
  "IQoJb3JpZ2luX2Vj", "FwoGZXIvYXdzE", "ABSK", "amzn.mws.",
  "LTAI", "AKID", "SCW", "dop_v1_", "doo_v1_", "dor_v1_", "HRKU-", "v1.0-", "fo1_", "fm1a_", "fm1r_",
  "fm2_", "vcp_", "vck_", "vci_", "vca_", "vcr_", "nfp_", "rnd_", "sbp_", "sb_secret_", "pscale_",
  "dapi", "sha256~", "y0_", "AQVN", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-",
  "gldt-", "glrt-", "glptt-", "glsoat-", "glft-", "glimt-", "glcbt-", "gloas-", "glagent-", "glffct-",
  "glwt-", "GR1348941", "ATBB", "ATATT3", "ATCTT3", "npm_", "pypi-AgE", "rubygems_", "oy2",
  "CLOJARS_", "dckr_pat_", "dckr_oat_", "hvs.", "hvb.", "hvr.", "dp.", "pul-", "PMAK-", "AKCp",
  "cmVmd", "sqp_", "squ_", "sqa_", "bkua_", "CCIPAT_", "pat.", "pat-", "API-", "sgp_", "ddp_",
  "ddw_", "pnu_", "ico-", "rdme_", "tk-us-", "sntrys_", "sntryu_", "glc_", "glsa_", "eyJrIjoi",
  "NRAK-", "NRII-", "NRAA-", "NRRA-", "NRJS-", "dt0c01.", "hcaik_", "hcaic_", "hcxik_", "hcxlk_",
  "NF-", "lin_api_", "lin_oauth_", "ntn_", "secret_", "figd_", "tfp_", "CFPAT-", "fio-u-", "p8e-",
  "dG9rOj", "oauth:", "sk.eyJ", "pk.eyJ", "phc_", "phx_", "EAA", "ops_eyJ", "A3-", "sl.", "xox",
  "xapp-", "SK", "SG.", "key-", "xkeysib-", "re_", "whsec_", "sq0atp-", "sq0csp-", "sq0idp-",
  "access_token$", "access-sandbox-", "access-development-", "access-production-", "FLWSECK",
  "FLWPUBK", "rzp_live_", "rzp_test_", "shpat_", "shpss_", "shpca_", "shppa_", "shippo_", "EZAK",
  "EZTK", "duffel_", "AGE-SECRET-KEY-1", "akab-", "v1.local.", "v2.local.", "v3.local.", "v4.local.",
  "v1.public.", "v2.public.", "v3.public.", "v4.public.",
];
const REDACTED = "[REDACTED]";
const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
const TOKEN = "[A-Za-z0-9._~+/=$!:@-]";
// A vendor token: its prefix, then 12 token characters or more with a digit or both cases (a real
// key's body; "key-rotation-scheduler" is words), or, after `sk-`, 5 with a digit (`sk-test-1…`).
// A prefix of 6 characters or more says enough alone ("glpat-" and 12 more).
const LONG_PREFIXES = PREFIXES.filter((prefix) => prefix.length >= 6);
const VENDOR = new RegExp(
  `(?<![A-Za-z0-9])(?:(?:${LONG_PREFIXES.map(escape).join("|")})${TOKEN}{12,}` +
    `|(?:${PREFIXES.map(escape).join("|")})` +
    `(?=${TOKEN}{0,200}(?:[0-9]|[A-Z]${TOKEN}{0,200}[a-z]|[a-z]${TOKEN}{0,200}[A-Z]))${TOKEN}{12,}` +
    `|sk-(?=[A-Za-z_-]{0,64}[0-9])[A-Za-z0-9][A-Za-z0-9_-]{4,})`,
  "g",
);
// vendors.py's shapes that no literal prefix starts.
const SHAPES = new RegExp(
  [
    String.raw`(?:AKIA|ABIA|ACCA|A3T[A-Z0-9]|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])`,
    String.raw`eyJ[A-Za-z0-9_-]{10,}={0,2}\.[A-Za-z0-9_-]{8,}={0,2}(?:\.[A-Za-z0-9_+/=-]*){0,3}`,
    String.raw`[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{20,}`,
    String.raw`pat[A-Za-z0-9]{14}\.[a-f0-9]{40,}`,
    String.raw`00D[A-Za-z0-9]{12,15}![A-Za-z0-9._]{20,}`,
    String.raw`(?:bot)?[0-9]{6,12}:AA[A-Za-z0-9_-]{30,}`,
    String.raw`[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}`,
    String.raw`[0-9a-f]{32}-us[0-9]{1,2}`,
    String.raw`(?:hooks\.slack\.com|discord(?:app)?\.com/api/webhooks|webhook\.office\.com/webhookb2|hooks\.zapier\.com/hooks/catch|maker\.ifttt\.com/trigger)/[^\s"'<>]{4,}`,
  ].join("|"),
  "g",
);
// A whole header whose value is the secret: to the end of its line.
const LINE_KEY = /\b((?:proxy-)?authorization|(?:set-)?cookie)(\s*[:=]\s*)[^\r\n]*/gi;
const SCHEME =
  /\b(bearer|basic|token|apikey|api-key|bot|jwt|digest|oauth|negotiate|ntlm)(\s+)(?=[A-Za-z0-9._~+/=-]{0,200}[^A-Za-z\s]|[A-Za-z]{8,})([A-Za-z0-9._~+/=-]{6,})/gi;
const PROSE = new Set(["authentication", "authorization", "credentials", "required", "expected", "invalid", "missing", "expired", "provided", "rejected", "supported", "endpoint"]);
const SECRET_WORDS =
  "password|passwd|pwd|pass|passphrase|secret|secrets|token|auth|credentials?|creds|signature|sig|dsn|[_.-]key|apikey|accountkey|accesskey|sharedaccesskey|secretkey|privatekey|clientkey";
const KEY_SUFFIX = "(?:[_.-](?:base|prod|production|dev|development|staging|test|live|value|b64|base64|hex|raw|old|new|current|previous|primary|secondary))?";
// A secret key name, its separator and its value (quoted: the whole quoted text).
const SECRET_KEY = new RegExp(
  String.raw`(?<![A-Za-z0-9])([A-Za-z0-9_.-]*?(?:${SECRET_WORDS})${KEY_SUFFIX})((?:\\*["'])?\s*[:=](\s*))(\\+"[^"\\]*\\+"|"[^"]*"|'[^']*'|[^\s"'&,;<>\\]+)`,
  "gi",
);
const NOT_SECRET = new Set(["pagetoken", "nextpagetoken", "nexttoken", "continuationtoken", "synctoken", "resumetoken", "idempotencykey", "idempotencytoken", "cursortoken"]);
const FLAG = /(--?[A-Za-z0-9-]*(?:password|passwd|secret|token|[_-]key)["']?[\s,=]+["']?)([^\s"',\]]+)/gi;
const WORD_SECRET = /(?<![A-Za-z0-9])(password|passwd)(\s+)(?=\S*[0-9])\S+/gi;
const CURL_USER = /(\s-u\s+[^\s:]+:)\S+/g;
const XML_SECRET = /<(password|secret|token|api_?key)>[^<]*</gi;
const USERINFO = /(\/\/[^/\s:@]*):[^/\s@]*@/g;
const USER_TOKEN = /(\/\/)[A-Za-z0-9_-]{16,}@/g;
const PRIVATE_KEY = new RegExp(
  String.raw`-{4,5} ?BEGIN [A-Z0-9 ]{0,40}?(?:PRIVATE|SECRET) KEY(?: BLOCK)? ?-{4,5}[\s\S]*?(?:-{4,5} ?END [A-Z0-9 ]{0,40}?(?:PRIVATE|SECRET) KEY(?: BLOCK)? ?-{4,5}|$)` +
    String.raw`|Private-Lines: ?[0-9]{1,4}(?:\s+(?:\\n)?(?!Private-)[A-Za-z0-9+/=]{4,})+(?:\s+(?:\\n)?Private-MAC: ?[0-9a-fA-F]+)?`,
  "g",
);
// Any long run of token characters with letters and digits: a key of a vendor not listed. Runs of
// hex and hyphens stay (UUIDs, test ids, trace ids, digests: join keys).
const LONG_RUN = /(?<![A-Za-z0-9_+-])(?=[A-Za-z_+-]{0,200}[0-9])(?=[0-9_+-]{0,200}[A-Za-z])[A-Za-z0-9_+-]{32,}={0,2}/g;
const HEX_RUN = /^(?=.{1,96}$)[0-9a-fA-F]{1,64}(?:-[0-9a-fA-F]{1,64})*$/;
const QUERY_VALUE = /([?&][^=&#\s?]+)=[^&#\s]*/g;

/** Free text without its secrets: vendor tokens, auth schemes, secret key values, URL passwords,
 * query values, private-key blocks, long token-looking runs; cut to `maxBytes` UTF-8 bytes.
 * It leans to redaction: a probe's free text is a console message or a URL, never a join key. */
/**
 * Whether a key's value is a line of source code a traceback quotes, which holds no secret: a
 * variable named as its key (`auth=auth`), an attribute of `self` or `cls`, a call
 * (`token = get_token()`), a type (`auth: AuthTypes | None`). The rule of `_source_code` in
 * cvdiag/scrubbing/matches.py, so a console error quoting code reads as the backend's would.
 */
function sourceCode(key: string, sep: string, value: string, rest: string): boolean {
  const name = /^[A-Za-z_][A-Za-z0-9_.]*/.exec(value)?.[0] ?? "";
  const after = value.slice(name.length) + rest;
  const flat = (word: string) => word.toLowerCase().replace(/[_.-]/g, "");
  if (!name) return false;
  if (flat(name) === flat(key) && name.length === value.length) return true;
  if (/^(self|cls)\.[A-Za-z_]/.test(name) && /^[)\]},]?/.test(after) && !/^[A-Za-z0-9]/.test(after)) return true;
  if (after.startsWith("(")) return !/[0-9]/.test(name); // `get_token(`, never `hunter2(`
  return sep.includes(":") && /^[A-Z][A-Za-z]*$/.test(name) && name.length === value.length
    && [" | ", " = ", "]", "["].some((next) => rest.startsWith(next));
}

export function cvdiagScrub(text: string, maxBytes = 512): string {
  let out = String(text)
    .replace(/[\u2028\u2029\u0085\v\f]/g, " ")
    .replace(PRIVATE_KEY, REDACTED)
    .replace(LINE_KEY, `$1$2${REDACTED}`)
    .replace(USERINFO, `$1:${REDACTED}@`)
    .replace(USER_TOKEN, `$1${REDACTED}@`)
    .replace(QUERY_VALUE, "$1=")
    .replace(SHAPES, REDACTED)
    .replace(VENDOR, REDACTED)
    .replace(SCHEME, (all, scheme: string, space: string, token: string) =>
      PROSE.has(token.toLowerCase()) ? all : `${scheme}${space}${REDACTED}`,
    )
    .replace(SECRET_KEY, (all, key: string, sep: string, space: string, value: string, at: number, whole: string) => {
      if (NOT_SECRET.has(key.toLowerCase().replace(/[_.-]/g, "")) || value === REDACTED) return all;
      if (sourceCode(key, sep, value, whole.slice(at + all.length, at + all.length + 3))) return all;
      // "auth: failed for user bob" is prose: after ": " only a value that looks like no word goes.
      const quote = /^\\*["']/.exec(value)?.[0] ?? "";
      if (space && !quote && /^[A-Za-z]{1,19}$/.test(value)) return all;
      return `${key}${sep}${quote}${REDACTED}${quote}`;
    })
    .replace(FLAG, `$1${REDACTED}`)
    .replace(WORD_SECRET, `$1$2${REDACTED}`)
    .replace(CURL_USER, `$1${REDACTED}`)
    .replace(XML_SECRET, `<$1>${REDACTED}<`)
    .replace(LONG_RUN, (run) => (HEX_RUN.test(run) ? run : REDACTED));
  if (Buffer.byteLength(out) > maxBytes) {
    out = Buffer.from(out).subarray(0, maxBytes).toString().replace(/\uFFFD+$/, "");
  }
  return out;
}

/** A URL as the probe writes it: no userinfo, no query values (keys stay), scrubbed. */
function safeUrl(raw: string, pathOnly: boolean): string {
  try {
    const url = new URL(raw);
    const keys = [...new Set(url.searchParams.keys())];
    const query = keys.length ? `?${keys.join("&")}` : "";
    const head = pathOnly ? "" : `${url.protocol}//${url.host}`;
    return cvdiagScrub(`${head}${url.pathname}${query}`, 1024);
  } catch {
    return cvdiagScrub(raw.split(/[?#]/)[0] ?? "", 1024);
  }
}

/** The first path segment, as the backend names its `demo`. */
function demoOf(raw: string): string {
  try {
    const segment = new URL(raw).pathname.split("/")[1] ?? "";
    return segment ? cvdiagScrub(decodeURIComponent(segment), 256) : "default";
  } catch {
    return "default";
  }
}

// --- the probe ----------------------------------------------------------------------------------

const EDGE_HEADERS = [
  "cf-ray", "cf-mitigated", "cf-cache-status", "x-railway-edge", "x-railway-request-id",
  "x-hikari-trace", "retry-after", "via", "server",
];
const TIERS: Record<Tier, number> = { default: 0, verbose: 1, debug: 2 };
const BOUNDARY_TIER: Record<string, Tier> = {
  "probe.message.send": "verbose",
  "probe.network.response": "verbose",
  "probe.dom.container.mount": "verbose",
  "probe.dom.firsttoken": "verbose",
};

type Outcome = "ok" | "err" | "timeout" | "info";
type Cause = "client-timeout" | "network-error" | "left-early";

/** One request the test sent, from its send to its end. */
type Sent = {
  index: number;
  url: string;
  demo: string;
  sentMono: bigint;
  headMono: bigint | null;
  ended: boolean;
  events: number;
  bytes: number;
  timeoutMs: number | null;
};

/** The probe of one test attempt: it writes that attempt's lines. */
export class Probe {
  readonly testId: string;
  readonly startMono = process.hrtime.bigint();
  private readonly startTs = new Date().toISOString();
  private started = false;
  private requests = 0;
  private sseEvents = 0;
  private firstBodyMs: number | null = null;
  private firstTokenMs: number | null = null;
  private mounted = false;
  private readonly sent = new Map<object, Sent>();

  constructor(
    private readonly testInfo: TestInfo,
    private readonly path: string,
    private readonly tier: Tier,
    private readonly slug: string,
  ) {
    this.testId = uuidv7();
  }

  private sinceStart(): number {
    return Number((process.hrtime.bigint() - this.startMono) / 1_000_000n);
  }

  /** One envelope, appended as one whole line (mono_ns as an integer of any size). */
  private write(
    boundary: string,
    metadata: Record<string, Json>,
    outcome: Outcome = "info",
    options: { durationMs?: number | null; demo?: string; edge?: Record<string, string | null>; at?: [string, bigint] } = {},
  ): void {
    if (TIERS[BOUNDARY_TIER[boundary] ?? "default"] > TIERS[this.tier]) return;
    const [ts, mono] = options.at ?? [new Date().toISOString(), process.hrtime.bigint()];
    const edge: Record<string, string | null> = {};
    for (const name of EDGE_HEADERS) edge[name] = options.edge?.[name] ?? null;
    const envelope = {
      schema_version: 1,
      test_id: this.testId,
      trace_id: this.testId,
      span_id: randomBytes(8).toString("hex"),
      parent_span_id: null,
      layer: "probe",
      boundary,
      slug: this.slug,
      demo: options.demo ?? "default",
      ts,
      mono_ns: 0,
      duration_ms: options.durationMs ?? null,
      outcome,
      edge_headers: edge,
      metadata,
    };
    const text = JSON.stringify(envelope).replace('"mono_ns":0', `"mono_ns":${mono}`);
    try {
      appendFileSync(this.path, `CVDIAG ${text}\n`);
    } catch {
      // A probe that cannot write never fails the test it watches.
    }
  }

  /** `probe.start`, stamped when the test began, written once before any other line. */
  start(url: string | null, viewport: string | null): void {
    if (this.started) return;
    this.started = true;
    const test = cvdiagScrub(this.testInfo.titlePath.join(" > "), 256);
    this.write("probe.start", { url: url === null ? null : safeUrl(url, false), viewport, runner: "playwright", test }, "info", {
      at: [this.startTs, this.startMono],
    });
  }

  /** A request carrying the test id was sent: `probe.message.send`. */
  send(key: object, method: string, url: string, bodyBytes: number | null, timeoutMs: number | null): Sent {
    this.start(null, null);
    const entry: Sent = {
      index: this.requests++,
      url,
      demo: demoOf(url),
      sentMono: process.hrtime.bigint(),
      headMono: null,
      ended: false,
      events: 0,
      bytes: 0,
      timeoutMs,
    };
    this.sent.set(key, entry);
    this.write(
      "probe.message.send",
      { message_index: entry.index, char_count: bodyBytes, demo: entry.demo, method, url: safeUrl(url, true), timeout_ms: timeoutMs },
      "info",
      { demo: entry.demo },
    );
    return entry;
  }

  lookup(key: object): Sent | undefined {
    return this.sent.get(key);
  }

  /** The latest request sent to `url`: the stream a page's event came from. */
  latestFor(url: string): Sent | undefined {
    return [...this.sent.values()].filter((entry) => entry.url === url).pop();
  }

  /** The response head arrived (for the `request` fixture: the whole answer, as it returns then). */
  response(entry: Sent, status: number, headers: Record<string, string>, durationMs: number | null, wholeBody: boolean): void {
    entry.headMono = process.hrtime.bigint();
    const length = headers["content-length"] === undefined ? null : Number(headers["content-length"]);
    if (wholeBody && length !== 0 && this.firstBodyMs === null) this.firstBodyMs = this.sinceStart();
    const edge: Record<string, string | null> = {};
    for (const name of EDGE_HEADERS) if (headers[name] !== undefined) edge[name] = cvdiagScrub(headers[name], 256);
    const duration = durationMs ?? Number((entry.headMono - entry.sentMono) / 1_000_000n);
    this.write(
      "probe.network.response",
      { url: safeUrl(entry.url, false), status, content_length: Number.isFinite(length) ? length : null, duration_ms: duration, message_index: entry.index },
      status >= 400 ? "err" : "info",
      { durationMs: duration, demo: entry.demo, edge },
    );
  }

  /** The request failed before a head: `probe.network.error`. */
  error(entry: Sent, errorClass: string, cause: Cause, timeoutMs: number | null): void {
    if (entry.ended) return; // said once: by the browser, the call, or the test's end
    entry.ended = true;
    this.write(
      "probe.network.error",
      { url: safeUrl(entry.url, false), error_class: cvdiagScrub(errorClass, 128), response_status: null, message_index: entry.index, timeout_ms: timeoutMs, cause },
      cause === "client-timeout" ? "timeout" : cause === "left-early" ? "info" : "err",
      { demo: entry.demo },
    );
  }

  /** The body was cut on the client's side after its head: `probe.sse.aborted`. */
  aborted(entry: Sent, kind: "rst" | "timeout" | "chunk_error" | "fin_premature", cause: Cause, timeoutMs: number | null): void {
    if (entry.ended) return;
    entry.ended = true;
    this.write(
      "probe.sse.aborted",
      { termination_kind: kind, bytes_before_abort: entry.bytes, message_index: entry.index, timeout_ms: timeoutMs, cause },
      cause === "client-timeout" ? "timeout" : cause === "left-early" ? "info" : "err",
      { demo: entry.demo },
    );
  }

  /** An SSE event the page's code received (the first of a request at verbose, every one at debug). */
  sseEvent(entry: Sent, eventType: string, size: number): void {
    if (this.firstBodyMs === null) this.firstBodyMs = this.sinceStart();
    this.sseEvents++;
    entry.bytes += size;
    const sequence = entry.events++;
    if (sequence > 0 && this.tier !== "debug") return;
    if (sequence === 0 && this.tier === "default") return;
    this.write(
      "probe.sse.event",
      { event_type: cvdiagScrub(eventType, 64), payload_size_bytes: size, sequence_num: sequence, message_index: entry.index },
      "info",
      { demo: entry.demo },
    );
  }

  mount(): void {
    if (this.mounted) return;
    this.mounted = true;
    this.write("probe.dom.container.mount", { delta_ms_from_start: this.sinceStart() });
  }

  firstToken(textLength: number): void {
    if (this.firstTokenMs !== null) return;
    this.firstTokenMs = this.sinceStart();
    this.write("probe.dom.firsttoken", { delta_ms_from_start: this.firstTokenMs, text_length: textLength });
  }

  consoleError(level: string, message: string, source: string | null, lineCol: string | null): void {
    this.start(null, null);
    this.write(
      "probe.console.error",
      { level, message_scrubbed: cvdiagScrub(message, 512), source_file: source === null ? null : safeUrl(source, false), line_col: lineCol },
      "err",
    );
  }

  /** A call that failed with no timeout of its own: the test's timeout when the test ran out of
   * time (its request context was disposed under it), else the network. */
  failed(entry: Sent, errorClass: string): void {
    if (this.testInfo.status === "timedOut") this.error(entry, errorClass, "client-timeout", this.testInfo.timeout);
    else this.error(entry, errorClass, "network-error", null);
  }

  /** The requests still open when the test let go of them: cut on purpose, or by its timeout. */
  leave(pending: Iterable<Sent>): void {
    const timedOut = this.testInfo.status === "timedOut";
    const cause: Cause = timedOut ? "client-timeout" : "left-early";
    const timeout = timedOut ? this.testInfo.timeout : null;
    for (const entry of pending) {
      if (entry.ended) continue;
      if (entry.headMono === null) this.error(entry, timedOut ? "TimeoutError" : "Aborted", cause, timeout);
      else this.aborted(entry, timedOut ? "timeout" : "fin_premature", cause, timeout);
    }
  }

  pending(): Sent[] {
    return [...this.sent.values()].filter((entry) => !entry.ended);
  }

  /** `probe.exit`, at teardown: how the test ended. */
  exit(): void {
    this.start(null, null);
    const status = this.testInfo.status;
    const terminal = status === "passed" ? "ok" : status === "timedOut" ? "timeout" : status === "skipped" ? "ok" : "err";
    const testOutcome = status === "passed" ? "passed" : status === "skipped" ? "skipped" : "failed";
    const total = this.sinceStart();
    this.write(
      "probe.exit",
      {
        terminal_outcome: terminal,
        total_duration_ms: total,
        sse_event_count: this.sseEvents,
        first_token_delta_ms: this.firstTokenMs ?? this.firstBodyMs,
        test_outcome: testOutcome,
        requests: this.requests,
      },
      terminal === "ok" ? "ok" : terminal,
      { durationMs: total },
    );
  }
}

// --- what the page's own code saw ---------------------------------------------------------------
// Runs in the page before its scripts: reports each SSE event its code reads (EventSource
// messages; a fetch stream's events as its reader takes them, so the stream lives exactly as long
// as the page keeps it) and the first text in the token container, through one binding.

type PageReport = { kind: "sse"; url: string; type: string; size: number } | { kind: "mount" } | { kind: "token"; length: number };

function pageObserver(selector: string | null): void {
  const report = (data: unknown): void => {
    try {
      void (window as unknown as { __cvdiagProbe: (d: unknown) => Promise<void> }).__cvdiagProbe(data);
    } catch {
      // the page's own code goes on
    }
  };
  const size = (text: string): number => new TextEncoder().encode(text).length;
  const Native = window.EventSource;
  if (Native) {
    // Each EventSource the page makes is a real one, with a listener of ours for each event type
    // the page listens to (an event of a type nobody listens to is never read).
    const Observed = function (url: string | URL, init?: EventSourceInit): EventSource {
      const source = new Native(url, init);
      const add = source.addEventListener.bind(source) as (type: string, listener: EventListener, options?: unknown) => void;
      const types = new Set<string>();
      const watch = (type: string): void => {
        if (types.has(type)) return;
        types.add(type);
        add(type, (event: Event) => {
          const data = (event as MessageEvent).data;
          report({ kind: "sse", url: source.url, type, size: typeof data === "string" ? size(data) : 0 });
        });
      };
      watch("message");
      Object.defineProperty(source, "addEventListener", {
        configurable: true,
        writable: true,
        value: (type: string, listener: EventListener, options?: unknown): void => {
          if (type !== "open" && type !== "error") watch(type);
          add(type, listener, options);
        },
      });
      return source;
    } as unknown as typeof EventSource;
    Object.assign(Observed, { prototype: Native.prototype, CONNECTING: 0, OPEN: 1, CLOSED: 2 });
    window.EventSource = Observed;
  }
  const nativeFetch = window.fetch;
  window.fetch = async function (...args: Parameters<typeof fetch>): Promise<Response> {
    const response = await nativeFetch.apply(this, args);
    try {
      const body = response.body;
      if (body && (response.headers.get("content-type") ?? "").includes("text/event-stream")) {
        let observed: ReadableStream<Uint8Array> | null = null;
        Object.defineProperty(response, "body", {
          get() {
            if (observed) return observed;
            const decoder = new TextDecoder();
            let buffer = "";
            observed = body.pipeThrough(
              new TransformStream<Uint8Array, Uint8Array>({
                transform(chunk, controller) {
                  buffer += decoder.decode(chunk, { stream: true });
                  const blocks = buffer.split(/\r\n\r\n|\n\n|\r\r/);
                  buffer = blocks.pop() ?? "";
                  for (const block of blocks) {
                    let type = "message";
                    const data: string[] = [];
                    for (const line of block.split(/\r\n|\n|\r/)) {
                      if (line.startsWith("event:")) type = line.slice(6).trim() || "message";
                      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
                    }
                    if (data.length) report({ kind: "sse", url: response.url, type, size: size(data.join("\n")) });
                  }
                  controller.enqueue(chunk);
                },
              }),
            );
            return observed;
          },
        });
      }
    } catch {
      // observing never changes what the page gets
    }
    return response;
  };
  if (selector) {
    let mounted = false;
    const check = (): void => {
      const container = document.querySelector(selector);
      if (!container) return;
      if (!mounted) {
        mounted = true;
        report({ kind: "mount" });
      }
      const text = (container.textContent ?? "").trim();
      if (text.length > 0) {
        report({ kind: "token", length: text.length });
        observer.disconnect();
      }
    };
    const observer = new MutationObserver(check);
    observer.observe(document, { childList: true, subtree: true, characterData: true });
  }
}

/** Each request of the browser context (every one carries the test id, by `extraHTTPHeaders`). */
function watchContext(context: BrowserContext, probe: Probe): void {
  const track = (request: Request): void => {
    const url = request.url();
    if (!/^https?:/.test(url)) return;
    const body = request.postDataBuffer();
    probe.send(request, request.method(), url, body ? body.length : 0, null);
  };
  context.on("request", track);
  context.on("response", (response) => {
    const entry = probe.lookup(response.request());
    if (!entry) return;
    const timing = response.request().timing();
    const duration = timing.responseStart >= 0 ? Math.round(timing.responseStart) : null;
    probe.response(entry, response.status(), response.headers(), duration, false);
  });
  context.on("requestfinished", (request) => {
    const entry = probe.lookup(request);
    if (entry) entry.ended = true;
  });
  context.on("requestfailed", (request) => {
    const entry = probe.lookup(request);
    if (!entry || entry.ended) return;
    const text = request.failure()?.errorText ?? "failed";
    const cause: Cause = /ERR_ABORTED/.test(text) ? "left-early" : /TIMED_OUT/.test(text) ? "client-timeout" : "network-error";
    if (entry.headMono === null) probe.error(entry, text, cause, null);
    else {
      // As the pytest probe says it: left on purpose is fin_premature; the network's own cuts by kind.
      const kind = cause === "left-early" ? "fin_premature" : /TIMED_OUT/.test(text) ? "timeout" : /RESET/.test(text) ? "rst" : /CLOSED|EMPTY_RESPONSE/.test(text) ? "fin_premature" : "chunk_error";
      probe.aborted(entry, kind, cause, null);
    }
  });
  const watchPage = (page: Page): void => {
    const pageRequests = new Set<Sent>();
    page.on("request", (request) => {
      const entry = probe.lookup(request);
      if (entry) pageRequests.add(entry);
    });
    page.on("console", (message) => {
      if (message.type() !== "error") return;
      const where = message.location();
      probe.consoleError("error", message.text(), where.url || null, where.url ? `${where.lineNumber}:${where.columnNumber}` : null);
    });
    page.on("pageerror", (error) => {
      probe.consoleError("pageerror", `${error.name}: ${error.message}`, null, null);
    });
    // A page the test closed: what it still read was left on purpose (or by the test's timeout).
    page.on("close", () => probe.leave(pageRequests));
  };
  context.on("page", watchPage);
  for (const page of context.pages()) watchPage(page);
}

/** The `request` fixture with each call seen: sent, answered, or failed (with its timeout). */
function watchRequests(request: APIRequestContext, probe: Probe, baseURL: string | undefined, actionTimeout: number | undefined): APIRequestContext {
  const methods = new Set(["fetch", "get", "post", "put", "patch", "delete", "head"]);
  return new Proxy(request, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (typeof value !== "function") return value;
      const call = value as (...args: unknown[]) => Promise<unknown>;
      if (typeof property !== "string" || !methods.has(property)) return call.bind(target);
      return async (target_: unknown, options: Record<string, unknown> = {}) => {
        const isRequest = typeof target_ === "object" && target_ !== null && "url" in target_;
        const raw = isRequest ? (target_ as Request).url() : String(target_);
        let url = raw;
        try {
          url = new URL(raw, baseURL).href;
        } catch {
          // kept as given
        }
        const method = (property === "fetch" ? String(options.method ?? (isRequest ? (target_ as Request).method() : "GET")) : property).toUpperCase();
        const data = options.data;
        const bytes = data === undefined ? 0 : typeof data === "string" ? Buffer.byteLength(data) : Buffer.isBuffer(data) ? data.length : Buffer.byteLength(JSON.stringify(data) ?? "");
        const timeout = typeof options.timeout === "number" ? options.timeout : actionTimeout ? actionTimeout : null;
        const entry = probe.send({}, method, url, bytes, timeout);
        try {
          // Called as a method, so Playwright names the call as the test wrote it ("apiRequestContext.post").
          const methods_ = target as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
          const answer = (await methods_[property](target_, options)) as { status(): number; headers(): Record<string, string> };
          probe.response(entry, answer.status(), answer.headers(), null, true);
          entry.ended = true;
          return answer;
        } catch (error) {
          const err = error as Error;
          const timedOut = /Timeout (\d+)ms exceeded/.exec(err?.message ?? "");
          if (timedOut) probe.error(entry, err?.name || "Error", "client-timeout", Number(timedOut[1]));
          else probe.failed(entry, err?.name || "Error");
          throw error;
        }
      };
    },
  });
}

// --- the fixtures -------------------------------------------------------------------------------

export const test = base.extend<CvdiagOptions & CvdiagFixtures>({
  cvdiagTokenSelector: [null, { option: true }],
  cvdiagTier: ["verbose", { option: true }],
  cvdiagSlug: ["probe", { option: true }],
  cvdiagProbe: [
    async ({ cvdiagTier, cvdiagSlug }, use, testInfo) => {
      const probe = new Probe(testInfo, process.env.CVDIAG_PROBE_LOG ?? "cvdiag-probe.log", cvdiagTier, cvdiagSlug);
      testInfo.annotations.push({ type: "cvdiag_test_id", description: probe.testId });
      console.log(`cvdiag-test-id: ${probe.testId}`);
      await use(probe);
      probe.leave(probe.pending());
      probe.exit();
    },
    { auto: true },
  ],
  cvdiagTestId: async ({ cvdiagProbe }, use) => {
    await use(cvdiagProbe.testId);
  },
  extraHTTPHeaders: async ({ extraHTTPHeaders, cvdiagProbe }, use) => {
    await use({ ...extraHTTPHeaders, "x-test-id": cvdiagProbe.testId });
  },
  request: async ({ request, cvdiagProbe, baseURL, actionTimeout }, use) => {
    cvdiagProbe.start(null, null);
    await use(watchRequests(request, cvdiagProbe, baseURL, actionTimeout));
  },
  context: async ({ context, cvdiagProbe, cvdiagTokenSelector, baseURL, viewport }, use) => {
    cvdiagProbe.start(baseURL ?? null, viewport ? `${viewport.width}x${viewport.height}` : null);
    await context.exposeBinding("__cvdiagProbe", (_source, data: PageReport) => {
      if (data.kind === "mount") cvdiagProbe.mount();
      else if (data.kind === "token") cvdiagProbe.firstToken(data.length);
      else {
        const entry = cvdiagProbe.latestFor(data.url);
        if (entry) cvdiagProbe.sseEvent(entry, data.type, data.size);
      }
    });
    await context.addInitScript(pageObserver, cvdiagTokenSelector);
    watchContext(context, cvdiagProbe);
    await use(context);
    // The test is over and its context about to close: what it still read, it left.
    cvdiagProbe.leave(cvdiagProbe.pending());
  },
});
