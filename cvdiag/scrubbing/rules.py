# ruff: noqa: E501 - a table of rules reads best one rule to a line
"""What the scrubber redacts, as data: vendor token shapes, auth schemes and secret key names.

Every vendor rule names its family, the token's shape and a fake example that
``tests/test_scrub_rules.py`` redacts. Examples are assembled here at import time from a prefix
and a patterned filler, so no file in the repository holds a credential-shaped literal (push
protection and secret scanners stay quiet, and nobody mistakes one for a real key).

Shapes were learned from the public rule sets of gitleaks, trufflehog and detect-secrets; the
patterns are written for this scrubber: each starts with its literal prefix (the engine matches it
only at a token boundary) and its body takes every following token character, so a token longer
than its vendor documents still goes whole.
"""

from __future__ import annotations

from itertools import cycle, islice
from typing import Final, NamedTuple


class VendorRule(NamedTuple):
    family: str
    #: The token's regex. The engine puts a token-boundary check in front of it.
    pattern: str
    #: A fake credential of this shape (the test suite checks the rule redacts it whole).
    example: str
    #: Lowercase literals of which one always occurs in a match: the prefilter looks for them.
    hints: tuple[str, ...]


_FILLERS: Final = {
    "an": "Fake0Xmpl1Dummy2Test3Sample4Token5Value6Zz7Qq8Ww9",
    "hex": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
    "HEX": "0F1E2D3C4B5A69788796A5B4C3D2E1F0",
    "up": "FAKE0EXAMPLE1DUMMY2TEST3KEY4VALUE5",
    "lo": "fake0example1dummy2test3key4value5",
    "dig": "0123456789",
    "b64": "Fake0Xmpl+Dummy2/Test3Sample4+Value5/Zz7",
    "url": "Fake0-Xmpl_Dummy2-Test3_Sample4-Value5_Zz7",
    "b32": "FAKE2EXAMP7LE9QPZRY3TVDW0",
}


def fake(kind: str, length: int) -> str:
    """``length`` characters of an obviously patterned, never random, filler."""
    return "".join(islice(cycle(_FILLERS[kind]), length))


def _hints_of(pattern: str) -> tuple[str, ...]:
    """The literal characters a pattern starts with, lowercased: its prefilter hint."""
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern) and not pattern[i + 1].isalnum():
            out.append(pattern[i + 1])
            i += 2
            continue
        if char in "[(.{*+?|^$\\":
            break
        out.append(char)
        i += 1
    if len(out) > 1 and pattern[i : i + 1] in ("?", "*", "{"):
        out.pop()  # the last literal is optional or repeated: not always there
    hint = "".join(out).lower()
    if len(hint) < 2:
        raise ValueError(f"no literal prefix in {pattern!r}: give hints")
    return (hint,)


def _rule(
    family: str, pattern: str, example: str, hints: tuple[str, ...] | None = None
) -> VendorRule:
    return VendorRule(family, pattern, example, hints or _hints_of(pattern))


_T: Final = "[A-Za-z0-9_-]"
_AN: Final = "[A-Za-z0-9]"

# fmt: off
VENDOR_RULES: Final[tuple[VendorRule, ...]] = (
    # --- AI and LLM providers
    _rule("openai-project", rf"sk-proj-{_T}{{16,}}", "sk-proj-" + fake("url", 48)),
    _rule("openai-service-account", rf"sk-svcacct-{_T}{{16,}}", "sk-svcacct-" + fake("url", 40)),
    _rule("openai-admin", rf"sk-admin-{_T}{{16,}}", "sk-admin-" + fake("url", 40)),
    _rule("anthropic", rf"sk-ant-(?:api|admin|oat|sid)[0-9]{{2}}-{_T}{{16,}}",
          "sk-ant-api03-" + fake("url", 93) + "AA"),
    _rule("openrouter", r"sk-or-v[0-9]-[a-f0-9]{32,}", "sk-or-v1-" + fake("hex", 64)),
    _rule("langfuse", r"[sp]k-lf-[0-9a-f-]{20,}", "sk-lf-" + fake("hex", 32), ("sk-lf-", "pk-lf-")),
    _rule("helicone", rf"sk-helicone-{_T}{{16,}}", "sk-helicone-" + fake("lo", 32)),
    _rule("deepseek", r"sk-[a-f0-9]{32,}", "sk-" + fake("hex", 32)),
    # OpenAI's legacy keys and every other ``sk-`` key: a digit within the body keeps the rule
    # off words like ``sk-learn`` (the boundary already keeps it off ``task-agent``).
    _rule("openai", r"sk-(?=[A-Za-z_-]{0,64}[0-9])[A-Za-z0-9][A-Za-z0-9_-]{4,}",
          "sk-" + fake("an", 48)),
    _rule("groq", rf"gsk_{_AN}{{20,}}", "gsk_" + fake("an", 52)),
    _rule("xai", rf"xai-{_AN}{{20,}}", "xai-" + fake("an", 80)),
    _rule("perplexity", rf"pplx-{_AN}{{20,}}", "pplx-" + fake("an", 48)),
    _rule("replicate", rf"r8_{_AN}{{20,}}", "r8_" + fake("an", 37)),
    _rule("huggingface", rf"hf_{_AN}{{20,}}", "hf_" + fake("an", 34)),
    _rule("huggingface-org", rf"api_org_{_AN}{{20,}}", "api_org_" + fake("an", 34)),
    _rule("langsmith", r"lsv2_(?:pt|sk)_[a-f0-9_]{20,}",
          "lsv2_pt_" + fake("hex", 32) + "_" + fake("hex", 10), ("lsv2_pt_", "lsv2_sk_")),
    _rule("cerebras", r"csk-[a-z0-9]{20,}", "csk-" + fake("lo", 48)),
    _rule("nvidia", rf"nvapi-{_T}{{20,}}", "nvapi-" + fake("url", 64)),
    _rule("pinecone", rf"pcsk_{_T}{{20,}}", "pcsk_" + fake("url", 60)),
    _rule("fireworks", rf"fw_{_AN}{{20,}}", "fw_" + fake("an", 24)),
    _rule("together", rf"tgp_v1_{_T}{{20,}}", "tgp_v1_" + fake("url", 43)),
    _rule("voyage", rf"pa-{_T}{{30,}}", "pa-" + fake("url", 43)),
    _rule("runpod", rf"rpa_{_AN}{{20,}}", "rpa_" + fake("up", 40)),
    _rule("anyscale", rf"esecret_{_AN}{{20,}}", "esecret_" + fake("an", 30)),
    _rule("tavily", rf"tvly-(?:dev-|prod-)?{_AN}{{20,}}", "tvly-dev-" + fake("an", 32)),
    _rule("firecrawl", r"fc-[a-f0-9]{24,}", "fc-" + fake("hex", 32)),
    _rule("e2b", r"e2b_[a-f0-9]{30,}", "e2b_" + fake("hex", 40)),
    _rule("jina", rf"jina_{_T}{{30,}}", "jina_" + fake("url", 60)),
    _rule("mem0", rf"m0-{_AN}{{30,}}", "m0-" + fake("an", 40)),
    _rule("browserbase", rf"bb_(?:live|test)_{_T}{{20,}}", "bb_live_" + fake("url", 27),
          ("bb_live_", "bb_test_")),
    _rule("elevenlabs", r"sk_[a-f0-9]{40,}", "sk_" + fake("hex", 48)),
    _rule("openai-session", rf"sess-{_AN}{{30,}}", "sess-" + fake("an", 40)),
    _rule("modal", rf"a[ks]-{_AN}{{22,}}", "ak-" + fake("an", 22), ("ak-", "as-")),
    # --- clouds
    _rule("google-api-key", r"AIza[0-9A-Za-z_-]{30,}", "AIza" + fake("url", 35)),
    _rule("google-oauth-access", r"ya29\.[0-9A-Za-z_.-]{20,}", "ya29." + fake("url", 60)),
    _rule("google-oauth-refresh", r"1//0[0-9A-Za-z_-]{20,}", "1//0" + fake("url", 60)),
    _rule("google-oauth-client-secret", rf"GOCSPX-{_T}{{20,}}", "GOCSPX-" + fake("url", 28)),
    _rule("aws-access-key", r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z0-9]{12,}",
          "AKIA" + fake("up", 16), ("akia", "asia", "abia", "acca", "a3t")),
    _rule("aws-session-token", r"(?:IQoJb3JpZ2luX2Vj|FwoGZXIvYXdzE)[A-Za-z0-9+/=]{20,}",
          "IQoJb3JpZ2luX2Vj" + fake("b64", 120), ("iqojb3jpz2lux2vj", "fwogzxivyxdze")),
    _rule("aws-bedrock", r"ABSK[A-Za-z0-9+/=]{40,}", "ABSK" + fake("b64", 100)),
    _rule("aws-mws", r"amzn\.mws\.[0-9a-f-]{36}", "amzn.mws." + fake("hex", 8) + "-0f1e-2d3c-"
          "4b5a-" + fake("hex", 12)),
    _rule("azure-ad-client-secret", r"[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}",
          "Fk3" + "8Q~" + fake("url", 34), ("~",)),
    _rule("alibaba", rf"LTAI{_AN}{{16,}}", "LTAI" + fake("an", 20)),
    _rule("tencent", rf"AKID{_AN}{{28,}}", "AKID" + fake("an", 32)),
    _rule("scaleway", r"SCW[A-Z0-9]{17,}", "SCW" + fake("up", 17)),
    _rule("digitalocean", r"do[opr]_v1_[a-f0-9]{40,}", "dop_v1_" + fake("hex", 64),
          ("dop_v1_", "doo_v1_", "dor_v1_")),
    _rule("heroku", rf"HRKU-{_T}{{30,}}", "HRKU-" + fake("url", 60)),
    _rule("cloudflare-origin-ca", r"v1\.0-[a-f0-9]{24}-[a-f0-9]{64,}",
          "v1.0-" + fake("hex", 24) + "-" + fake("hex", 146)),
    _rule("flyio", r"(?:fo1_|fm1[ar]_|fm2_)[A-Za-z0-9+/_=,-]{30,}", "fm2_" + fake("b64", 120),
          ("fo1_", "fm1a_", "fm1r_", "fm2_")),
    _rule("vercel", rf"vc[pkiar]_{_AN}{{20,}}", "vcp_" + fake("an", 40),
          ("vcp_", "vck_", "vci_", "vca_", "vcr_")),
    _rule("netlify", rf"nfp_{_AN}{{30,}}", "nfp_" + fake("an", 36)),
    _rule("render", rf"rnd_{_AN}{{20,}}", "rnd_" + fake("an", 32)),
    _rule("supabase", rf"(?:sbp_[a-f0-9]{{40,}}|sb_secret_{_T}{{20,}})", "sbp_" + fake("hex", 40),
          ("sbp_", "sb_secret_")),
    _rule("planetscale", r"pscale_(?:tkn|pw|oauth)_[A-Za-z0-9_.=-]{30,}",
          "pscale_tkn_" + fake("url", 43), ("pscale_",)),
    _rule("databricks", r"dapi[a-f0-9]{32,}(?:-[0-9])?", "dapi" + fake("hex", 32)),
    _rule("openshift", rf"sha256~{_T}{{40,}}", "sha256~" + fake("url", 43)),
    _rule("yandex", rf"(?:y0_{_T}{{50,}}|AQVN{_T}{{35,}})", "y0_" + fake("url", 58),
          ("y0_", "aqvn")),
    # --- code hosting, packages, CI
    _rule("github", r"gh[pousr]_[A-Za-z0-9]{30,}", "ghp_" + fake("an", 36),
          ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    _rule("github-fine-grained", r"github_pat_[A-Za-z0-9_]{30,}",
          "github_pat_" + fake("an", 22) + "_" + fake("an", 59)),
    _rule("gitlab", rf"gl(?:pat|dt|rt|ptt|soat|ft|imt|cbt|oas|agent|ffct|wt)-{_T}{{20,}}",
          "glpat-" + fake("url", 20),
          tuple(f"gl{k}-" for k in ("pat", "dt", "rt", "ptt", "soat", "ft", "imt", "cbt", "oas", "agent", "ffct", "wt"))),
    _rule("gitlab-runner-registration", rf"GR1348941{_T}{{20,}}", "GR1348941" + fake("url", 20)),
    _rule("bitbucket", r"ATBB[A-Za-z0-9_=.-]{30,}", "ATBB" + fake("an", 32)),
    _rule("atlassian", r"ATATT3[A-Za-z0-9_=-]{30,}", "ATATT3" + fake("url", 186)),
    _rule("atlassian-cloud", r"ATCTT3[A-Za-z0-9_=-]{30,}", "ATCTT3" + fake("url", 180)),
    _rule("npm", rf"npm_{_AN}{{30,}}", "npm_" + fake("an", 36)),
    _rule("pypi", rf"pypi-AgE{_T}{{30,}}", "pypi-AgEIcHlwaS5vcmc" + fake("url", 70)),
    _rule("rubygems", r"rubygems_[a-f0-9]{40,}", "rubygems_" + fake("hex", 48)),
    _rule("nuget", r"oy2[a-z0-9]{40,}", "oy2" + fake("lo", 43)),
    _rule("clojars", r"CLOJARS_[A-Za-z0-9]{40,}", "CLOJARS_" + fake("lo", 60)),
    _rule("docker", rf"dckr_(?:pat|oat)_{_T}{{20,}}", "dckr_pat_" + fake("url", 27),
          ("dckr_pat_", "dckr_oat_")),
    _rule("terraform", r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,}",
          fake("an", 14) + ".atlasv1." + fake("url", 67), ("atlasv1",)),
    _rule("vault", rf"hv[sbr]\.{_T}{{20,}}", "hvs." + fake("url", 90), ("hvs.", "hvb.", "hvr.")),
    _rule("doppler", r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{20,}", "dp.pt." + fake("an", 43),
          ("dp.",)),
    _rule("pulumi", r"pul-[a-f0-9]{32,}", "pul-" + fake("hex", 40)),
    _rule("postman", r"PMAK-[A-Za-z0-9-]{40,}", "PMAK-" + fake("hex", 24) + "-" + fake("hex", 34)),
    _rule("artifactory", rf"AKCp{_AN}{{60,}}", "AKCp" + fake("an", 69)),
    _rule("artifactory-reference", rf"cmVmd{_AN}{{55,}}", "cmVmd" + fake("an", 59)),
    _rule("sonarqube", r"sq[pua]_[a-f0-9]{32,}", "sqp_" + fake("hex", 40), ("sqp_", "squ_", "sqa_")),
    _rule("buildkite", r"bkua_[a-f0-9]{32,}", "bkua_" + fake("hex", 40)),
    _rule("circleci", r"CCIPAT_[A-Za-z0-9_]{30,}", "CCIPAT_" + fake("an", 40)),
    _rule("harness", rf"pat\.{_T}{{20,}}\.[A-Za-z0-9.]{{30,}}",
          "pat." + fake("url", 22) + "." + fake("hex", 24) + "." + fake("an", 20), ("pat.",)),
    _rule("octopus", r"API-[A-Z0-9]{26,}", "API-" + fake("up", 26)),
    _rule("sourcegraph", r"sgp_[A-Za-z0-9_]{30,}", "sgp_" + fake("hex", 16) + "_" + fake("hex", 40)),
    _rule("deno-deploy", rf"dd[pw]_{_AN}{{30,}}", "ddp_" + fake("an", 36), ("ddp_", "ddw_")),
    _rule("prefect", rf"pnu_{_AN}{{30,}}", "pnu_" + fake("an", 36)),
    _rule("infracost", rf"ico-{_AN}{{30,}}", "ico-" + fake("an", 32)),
    _rule("readme", r"rdme_[a-z0-9]{40,}", "rdme_" + fake("lo", 70)),
    _rule("scalingo", rf"tk-us-{_T}{{40,}}", "tk-us-" + fake("url", 48)),
    # --- observability
    _rule("sentry", r"sntry[su]_[A-Za-z0-9+/=_]{40,}", "sntrys_" + fake("b64", 80),
          ("sntrys_", "sntryu_")),
    _rule("grafana-cloud", r"glc_[A-Za-z0-9+/]{32,}={0,2}", "glc_" + fake("b64", 80)),
    _rule("grafana-service-account", r"glsa_[A-Za-z0-9_]{32,}",
          "glsa_" + fake("an", 32) + "_" + fake("hex", 8)),
    _rule("grafana-legacy", r"eyJrIjoi[A-Za-z0-9+/]{60,}={0,2}", "eyJrIjoi" + fake("an", 72)),
    _rule("newrelic", rf"NR(?:AK|II|AA|RA|JS)-{_T}{{19,}}", "NRAK-" + fake("up", 27),
          ("nrak-", "nrii-", "nraa-", "nrra-", "nrjs-")),
    _rule("dynatrace", r"dt0c01\.[A-Za-z0-9]{20,}\.[A-Za-z0-9]{40,}",
          "dt0c01." + fake("up", 24) + "." + fake("up", 64)),
    _rule("honeycomb", r"hc(?:aik|aic|xik|xlk)_[a-z0-9]{20,}", "hcaik_" + fake("lo", 58),
          ("hcaik_", "hcaic_", "hcxik_", "hcxlk_")),
    _rule("nightfall", rf"NF-{_AN}{{32,}}", "NF-" + fake("an", 32)),
    # --- collaboration and SaaS
    _rule("linear", rf"lin_(?:api|oauth)_{_AN}{{30,}}", "lin_api_" + fake("an", 40),
          ("lin_api_", "lin_oauth_")),
    _rule("notion", rf"(?:ntn_{_AN}{{40,}}|secret_{_AN}{{40,}})", "ntn_" + fake("an", 46),
          ("ntn_", "secret_")),
    _rule("airtable", r"pat[A-Za-z0-9]{14}\.[a-f0-9]{40,}",
          "pat" + fake("an", 14) + "." + fake("hex", 64), ("pat",)),
    _rule("figma", rf"figd_{_T}{{30,}}", "figd_" + fake("url", 40)),
    _rule("typeform", r"tfp_[A-Za-z0-9_=.-]{40,}", "tfp_" + fake("url", 44)),
    _rule("hubspot", r"pat-(?:na|eu|ap)[0-9]-[0-9a-f-]{36}",
          "pat-na1-" + fake("hex", 8) + "-0f1e-2d3c-4b5a-" + fake("hex", 12),
          ("pat-na", "pat-eu", "pat-ap")),
    _rule("clickup", r"pk_[0-9]{4,}_[A-Z0-9]{20,}", "pk_" + fake("dig", 8) + "_" + fake("up", 32),
          ("pk_",)),
    _rule("salesforce", r"00D[A-Za-z0-9]{12,15}![A-Za-z0-9._]{60,}",
          "00D" + fake("an", 15) + "!" + fake("an", 96)),
    _rule("contentful", rf"CFPAT-{_T}{{40,}}", "CFPAT-" + fake("url", 43)),
    _rule("frameio", r"fio-u-[A-Za-z0-9_=-]{60,}", "fio-u-" + fake("url", 64)),
    _rule("adobe", rf"p8e-{_AN}{{32,}}", "p8e-" + fake("an", 32)),
    _rule("intercom", r"dG9rOj[A-Za-z0-9+/=_-]{20,}", "dG9rOj" + fake("b64", 54)),
    _rule("twitch", r"oauth:[a-z0-9]{30,}", "oauth:" + fake("lo", 30)),
    _rule("mapbox", rf"[ps]k\.eyJ{_T}{{20,}}\.{_T}{{10,}}",
          "sk.eyJ" + fake("url", 60) + "." + fake("url", 22), ("sk.eyj", "pk.eyj")),
    _rule("posthog", rf"ph[cx]_{_AN}{{30,}}", "phx_" + fake("an", 43), ("phc_", "phx_")),
    _rule("facebook", rf"EAA[A-Z]{_AN}{{40,}}", "EAAG" + fake("an", 120), ("eaa",)),
    _rule("1password", r"(?:ops_eyJ[A-Za-z0-9+/]{40,}={0,3}|A3-[A-Z0-9]{6}-[A-Z0-9-]{20,})",
          "ops_eyJ" + fake("b64", 250), ("ops_eyj", "a3-")),
    _rule("dropbox", r"sl\.[A-Za-z0-9_=.-]{60,}", "sl." + fake("url", 135)),
    # --- messaging and email
    _rule("slack", r"xox[abprse]-(?=[A-Za-z-]{0,20}[0-9])[A-Za-z0-9-]{10,}",
          "xoxb-" + fake("dig", 12) + "-" + fake("dig", 12) + "-" + fake("an", 24), ("xox",)),
    _rule("slack-config", rf"xoxe\.xox[bp]-{_T}{{10,}}", "xoxe.xoxp-1-" + fake("an", 140)),
    _rule("slack-app", rf"xapp-{_T}{{10,}}", "xapp-1-" + fake("up", 11) + "-" + fake("hex", 64)),
    _rule("slack-webhook", r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/-]{8,}",
          "hooks.slack.com/services/T" + fake("up", 8) + "/B" + fake("up", 8) + "/"
          + fake("an", 24)),
    _rule("discord-webhook", r"discord(?:app)?\.com/api/webhooks/[A-Za-z0-9_/-]{8,}",
          "discord.com/api/webhooks/" + fake("dig", 18) + "/" + fake("url", 68)),
    _rule("teams-webhook", r"webhook\.office\.com/webhookb2/[A-Za-z0-9@/_-]{20,}",
          "webhook.office.com/webhookb2/" + fake("hex", 32) + "@" + fake("hex", 32) + "/IncomingWebhook/"
          + fake("hex", 32)),
    _rule("zapier-webhook", r"hooks\.zapier\.com/hooks/catch/[0-9]+/[A-Za-z0-9]+",
          "hooks.zapier.com/hooks/catch/" + fake("dig", 7) + "/" + fake("lo", 6)),
    _rule("ifttt-webhook", r"maker\.ifttt\.com/trigger/[^/\s]{1,64}/with/key/[A-Za-z0-9_-]{10,}",
          "maker.ifttt.com/trigger/event/with/key/" + fake("url", 22)),
    _rule("telegram-bot", rf"(?:bot)?[0-9]{{6,12}}:AA{_T}{{30,}}",
          fake("dig", 10) + ":AA" + fake("url", 33), (":aa",)),
    _rule("twilio", r"SK[0-9a-fA-F]{32,}", "SK" + fake("hex", 32)),
    _rule("sendgrid", rf"SG\.{_T}{{16,}}\.{_T}{{16,}}", "SG." + fake("url", 22) + "." + fake("url", 43)),
    _rule("mailgun", rf"key-{_AN}{{32,}}", "key-" + fake("lo", 32)),
    _rule("mailchimp", r"[0-9a-f]{32}-us[0-9]{1,2}", fake("hex", 32) + "-us21",
          tuple(f"-us{n}" for n in range(1, 10))),
    _rule("brevo", r"xkeysib-[A-Za-z0-9-]{40,}", "xkeysib-" + fake("hex", 64) + "-" + fake("an", 16)),
    _rule("resend", rf"re_{_AN}{{8,}}_{_AN}{{16,}}", "re_" + fake("an", 8) + "_" + fake("an", 24)),
    # --- payments and commerce
    _rule("stripe", rf"[prs]k[-_](?:live|test)[-_]{_AN}{{8,}}", "sk_live_" + fake("an", 99),
          ("sk_live", "sk_test", "pk_live", "pk_test", "rk_live", "rk_test", "sk-live", "sk-test",
           "pk-live", "pk-test", "rk-live", "rk-test")),
    _rule("stripe-webhook", r"whsec_[A-Za-z0-9+/=]{20,}", "whsec_" + fake("an", 32)),
    _rule("square", rf"sq0(?:atp|csp|idp)-{_T}{{20,}}", "sq0atp-" + fake("url", 22),
          ("sq0atp-", "sq0csp-", "sq0idp-")),
    _rule("square-access-token", rf"EAAA{_T}{{40,}}", "EAAA" + fake("url", 60)),
    _rule("braintree", r"access_token\$(?:production|sandbox)\$[A-Za-z0-9$]{20,}",
          "access_token$production$" + fake("lo", 16) + "$" + fake("hex", 32)),
    _rule("plaid", r"access-(?:sandbox|development|production)-[0-9a-f-]{36}",
          "access-sandbox-" + fake("hex", 8) + "-0f1e-2d3c-4b5a-" + fake("hex", 12),
          ("access-sandbox-", "access-development-", "access-production-")),
    _rule("flutterwave", rf"FLW(?:SECK|PUBK)(?:_TEST)?-{_AN}{{20,}}(?:-X)?",
          "FLWSECK_TEST-" + fake("hex", 32) + "-X", ("flwseck", "flwpubk")),
    _rule("razorpay", rf"rzp_(?:live|test)_{_AN}{{14,}}", "rzp_live_" + fake("an", 14),
          ("rzp_live_", "rzp_test_")),
    _rule("shopify", r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32,}", "shpat_" + fake("hex", 32),
          ("shpat_", "shpss_", "shpca_", "shppa_")),
    _rule("shippo", r"shippo_(?:live|test)_[a-f0-9]{32,}", "shippo_live_" + fake("hex", 40),
          ("shippo_",)),
    _rule("easypost", rf"EZ[AT]K{_AN}{{50,}}", "EZAK" + fake("an", 54), ("ezak", "eztk")),
    _rule("duffel", r"duffel_(?:test|live)_[A-Za-z0-9_=-]{40,}", "duffel_test_" + fake("url", 43),
          ("duffel_",)),
    # --- keys, tokens and secrets of no single vendor
    _rule("age", r"AGE-SECRET-KEY-1[A-Z0-9]{40,}", "AGE-SECRET-KEY-1" + fake("b32", 58)),
    _rule("akamai", r"akab-[a-z0-9]{16}-[a-z0-9]{16}", "akab-" + fake("lo", 16) + "-" + fake("lo", 16)),
    _rule("paseto", rf"v[1-4]\.(?:local|public)\.{_T}{{30,}}", "v4.local." + fake("url", 80),
          tuple(f"v{n}.{k}." for n in "1234" for k in ("local", "public"))),
    _rule("jwt", r"eyJ[A-Za-z0-9_-]{10,}={0,2}\.[A-Za-z0-9_-]{8,}={0,2}(?:\.[A-Za-z0-9_+/=-]*){0,3}",
          "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJmYWtlIn0." + fake("url", 43), ("eyj",)),
)
# fmt: on

#: Private-key blocks: PEM of every kind (PKCS#1/#8, EC, DSA, OpenSSH, encrypted), PGP private
#: key blocks and SSH2's four-dash variant, to their END line (or the end of the text, when cut).
PRIVATE_KEY_BLOCK: Final = (
    r"-{4,5} ?BEGIN (?P<label>[A-Z0-9 ]{0,40}?(?:PRIVATE|SECRET) KEY(?: BLOCK)?) ?-{4,5}"
    r"[\s\S]*?(?:-{4,5} ?END [A-Z0-9 ]{0,40}?(?:PRIVATE|SECRET) KEY(?: BLOCK)? ?-{4,5}|\Z)"
    # PuTTY's .ppk: the private half follows its line count.
    r"|Private-Lines: ?[0-9]{1,4}(?:\s+(?:\\n)?(?!Private-)[A-Za-z0-9+/=]{4,})+"
    r"(?:\s+(?:\\n)?Private-MAC: ?[0-9a-fA-F]+)?"
)
PRIVATE_KEY_HINTS: Final = ("-----begin", "---- begin", "private-lines")

#: Authorization schemes. A scheme word redacts the token after it only when that token is
#: credential-shaped ("Basic plan users" and "Missing bearer token" are English).
SCHEMES: Final = (
    "bearer", "basic", "token", "apikey", "api-key", "negotiate", "ntlm", "kerberos",
    "hoba", "mutual", "ssws", "bot", "dpop", "jwt", "paseto", "splunk", "sharedkey",
    "sharedkeylite", "gapps", "googlelogin", "zoho-oauthtoken", "client-id", "sso-key",
    "apitoken", "api-token", "access-token", "privatetoken",
)  # fmt: skip
#: Schemes whose credential is a list of ``name=value`` parameters: the whole list goes.
PARAM_SCHEMES: Final = (
    "digest", "oauth", "hawk", "mac", "aws4-hmac-sha256", "sharedaccesssignature",
    "scram-sha-1", "scram-sha-256", "vapid", "signature",
)  # fmt: skip


def spellings(*stems: str) -> tuple[str, ...]:
    """``api key`` → api_key, api-key, apikey, api.key: the ways a multi-word key name is written."""
    return tuple(stem.replace(" ", sep) for stem in stems for sep in ("_", "-", "", "."))


#: Key names whose value is a secret (case-insensitive). A name counts only at a word start (or a
#: camelCase hump: ``clientSecret``) and directly followed by its separator.
SECRET_KEYS: Final = (
    "password", "passwd", "pwd", "pass", "passphrase", "pswd", "secret", "secrets", "token",
    "auth", "credential", "credentials", "creds", "signature", "sig", "dsn",
    *spellings(
        "api key", "access key", "secret key", "private key", "session id", "session token",
        "session key", "account key", "app key", "application key", "master key", "signing key",
        "encryption key", "client key", "shared key", "shared access key", "subscription key",
        "license key", "consumer key", "auth key", "admin key",
        "jsession id", "php sess id", "api secret", "access secret",
    ),
    "apiKey", "x-api-key", "xsrf-token", "csrf-token",
)  # fmt: skip
#: Endings a secret key name may carry (``SECRET_KEY_BASE``, ``DB_PASSWORD_PROD``): the name
#: still names a secret. Anything else after the name (``password_reset_url``) does not.
KEY_SUFFIXES: Final = (
    "base", "prod", "production", "dev", "development", "staging", "test", "live", "value",
    "b64", "base64", "hex", "raw", "old", "new", "current", "previous", "primary", "secondary",
)  # fmt: skip
#: Key names whose value runs to the end of the line: a header's whole value is the secret.
LINE_KEYS: Final = ("authorization", "proxy-authorization", "cookie", "set-cookie")

#: Full key names (lowercased, separators removed) that end in a secret word but name no
#: secret: pagination and counting. Their values stay.
NOT_SECRET_KEYS: Final = frozenset(
    {
        "pagetoken", "nextpagetoken", "nexttoken", "continuationtoken", "paginationtoken",
        "synctoken", "resumetoken", "cursortoken", "prevtoken", "previoustoken", "pagingtoken",
        "maxtoken", "mintoken", "numtoken", "idempotencytoken",
    }
)  # fmt: skip
#: Values that hide nothing: placeholders and empties, kept as written.
EMPTY_VALUES: Final = frozenset(
    {
        "", "null", "none", "nil", "true", "false", "undefined", "redacted", "[redacted]",
        "<redacted>", "hidden", "<hidden>", "masked", "***", "****", "*****", "******",
        "********", "xxx", "xxxx", "<secret>", "<token>", "<password>",
    }
)  # fmt: skip
