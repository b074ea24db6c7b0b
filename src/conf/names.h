/* sluice — the words of the configuration file for each enum value, shared
 * by the loader (defined in conf.c; used by sec_*.c and check.c) and the
 * printer (dump.c). Private to src/conf/. Each array is indexed by its enum
 * and ends with NULL. */
#ifndef SL_CONF_NAMES_H
#define SL_CONF_NAMES_H

extern const char *const sl_conf_proto_names[];   /* enum sl_proto */
extern const char *const sl_conf_metric_names[];  /* enum sl_metric */
extern const char *const sl_conf_scope_names[];   /* enum sl_scope */
extern const char *const sl_conf_algo_names[];    /* enum sl_algo */
extern const char *const sl_conf_action_names[];  /* enum sl_action */
extern const char *const sl_conf_overrides_names[]; /* sl_limit_conf.overrides: off, store */
extern const char *const sl_conf_fail_names[];    /* enum sl_on_failure */
extern const char *const sl_conf_id_names[];      /* enum sl_id_source ("header:NAME") */
extern const char *const sl_conf_rlh_names[];     /* enum sl_rl_headers */
extern const char *const sl_conf_tls_verify_names[]; /* off, optional, on */
extern const char *const sl_conf_onoff_names[];   /* off, on: 0, 1 */
extern const char *const sl_conf_adaptive_names[]; /* adaptive_concurrency: off, on, shadow */
extern const char *const sl_conf_adaptive_share_names[]; /* adaptive_share: store, off */
extern const char *const sl_conf_pp_names[];      /* proxy_protocol: off, v1, v2: 0, 1, 2 */
extern const char *const sl_conf_dlog_names[];    /* enum sl_decision_log */
extern const char *const sl_conf_alog_fmt_names[]; /* enum sl_access_format */
extern const char *const sl_conf_tls_verify_names[]; /* enum sl_tls_verify: off, optional, on */

#endif
