/* sluice — types of the HTTP answers sluice writes itself (429s, errors). */
#ifndef SL_PROTO_HTTP_ANSWER_T_H
#define SL_PROTO_HTTP_ANSWER_T_H

/* Which rate-limit fields answers carry: the listener's
 * rate_limit_headers (docs/http.md, "Answers"). Draft is 0: the default. */
enum sl_http_rl_mode {
    SL_HTTP_RL_DRAFT = 0, /* RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-11) */
    SL_HTTP_RL_LEGACY,    /* X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset */
    SL_HTTP_RL_BOTH,      /* both sets */
    SL_HTTP_RL_NONE,      /* neither (a 429 still has Retry-After) */
};

/* The most bytes any answer below takes, head and body: the renderers
 * never write more, so a buffer this big always holds one. */
#define SL_HTTP_ANSWER_MAX 2048

#endif
