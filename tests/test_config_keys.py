"""Every configuration key and command-line flag the server accepts either acts or is refused.

The keys come from the code itself: the builder's top-level dispatch table (``_Builder.top_handlers``), the
tables its sections dispatch through (``section_keys``: jetstream, websocket, authorization, cluster) and the
flag table (``flags.FLAGS``). Each key must be
  * covered: KEY_TESTS names a test (node id in the tests tree) showing what it does,
  * an alias: ALIASES names the key it spells differently, and loading either gives the same Options,
  * or refused: loading it fails with file:line:col and "is not supported".
A key added to the builder without an entry here (or a refusal) fails ``test_every_key_acts_or_is_refused``.
The tls {} block belongs to tests/test_tls_options.py (OCSP to tests/test_ocsp.py), which the map points into.
"""
from __future__ import annotations

import ast
import io
import os
import re
import time
from functools import lru_cache
from pathlib import Path

import pytest

from helpers import serve_config
from rillet.config import ConfigError
from rillet.config.flags import FLAGS, UnsupportedFlag, parse_command_line
from rillet.config.options import Options
from rillet.config.options_builder import _Builder, load_string
from rillet.config.parser import parse_string

TESTS = Path(__file__).parent
HERE = "tests/test_config_keys.py"

# key -> a test showing what the key does (the first spelling of each setting; aliases are in ALIASES)
KEY_TESTS: dict[str, str] = {
    "listen": "tests/test_cli.py::test_config_integer_duration_is_a_warning",
    "port": "tests/test_cli.py::test_fixed_port_and_name",
    "host": "tests/test_mapping.py::test_config_mappings_applied_on_publish",
    "client_advertise": f"{HERE}::test_client_advertise_is_the_connect_url",
    "server_name": "tests/test_protocol.py::test_info_server_name_and_max_payload",
    "http": "tests/test_monitor.py::test_start_log_listener_and_shutdown",
    "https": "tests/test_monitor.py::test_https_monitor",
    "http_port": "tests/test_startup.py::test_client_port_listens_before_the_monitor_starts",
    "https_port": "tests/test_monitor.py::test_https_monitor",
    "http_base_path": "tests/test_monitor.py::test_base_path",
    "http_metrics": "tests/test_monitor_metrics.py::test_scrape_values_follow_the_endpoints",
    "pid_file": "tests/test_cli.py::test_pid_file",
    "ports_file_dir": "tests/test_cli.py::test_random_port_ports_file_and_log_lines",
    "max_payload": "tests/test_parser.py::test_payload_exactly_max_payload_is_accepted",
    "max_control_line": "tests/test_parser.py::test_control_line_at_limit_is_accepted",
    "max_pending": "tests/test_limits.py::test_max_pending_cuts_off_stalled_subscriber",
    "max_pending_total": "tests/test_overload_pending.py::test_many_slow_subscribers_keep_the_total_bounded_and_others_answered",
    "no_fast_producer_stall": "tests/test_fairness.py::test_no_fast_producer_stall_drops_instead",
    "jetstream.request_queue_limit": "tests/test_fairness.py::test_api_queue_limit_drops_and_advises",
    "jetstream.info_queue_limit": "tests/test_fairness.py::test_api_queue_limit_drops_and_advises",
    "jetstream.max_buffered_msgs": "tests/test_max_buffered.py::test_a_burst_is_refused_with_429_like_nats_server",
    "jetstream.max_buffered_size": "tests/test_max_buffered.py::test_a_burst_is_refused_with_429_like_nats_server",
    "max_connections": "tests/test_auth.py::test_max_connections",
    "max_subscriptions": "tests/test_auth.py::test_max_subscriptions",
    "max_sub_tokens": "tests/test_max_sub_tokens.py::test_too_many_tokens_answered_as_nats_server",
    "proxy_protocol": "tests/test_proxy_protocol.py::test_server_reads_the_header_as_nats_server",
    "default_sentinel": "tests/test_default_sentinel.py::test_clients_without_a_user_jwt_get_the_sentinel",
    "default_js_domain": "tests/test_default_js_domain.py::test_leaf_clients_use_the_hubs_jetstream",
    "max_traced_msg_len": "tests/test_trace_payload.py::test_payload_trace_lines_as_nats_server",
    "max_closed_clients": f"{HERE}::test_max_closed_clients_bounds_the_closed_list",
    "ping_interval": "tests/test_protocol.py::test_stale_connection",
    "ping_max": "tests/test_protocol.py::test_stale_connection",
    "write_deadline": "tests/test_limits.py::test_write_deadline_cuts_off_stalled_subscriber",
    "write_timeout": "tests/test_write_timeout.py::test_client_write_timeout_policy",
    "lame_duck_duration": "tests/test_cli.py::test_sigusr2_lame_duck",
    "lame_duck_grace_period": "tests/test_cli.py::test_config_durations",
    "disable_sublist_cache": f"{HERE}::test_disable_sublist_cache",
    "no_header_support": f"{HERE}::test_no_header_support_in_info",
    "debug": "tests/test_cli.py::test_debug_and_trace_lines",
    "trace": "tests/test_cli.py::test_trace_redacts_password",
    "trace_verbose": f"{HERE}::test_trace_verbose_and_trace_headers_turn_tracing_on",
    "trace_headers": "tests/test_trace_payload.py::test_payload_trace_lines_as_nats_server",
    "logtime": f"{HERE}::test_logtime_and_logtime_utc",
    "logtime_utc": f"{HERE}::test_logtime_and_logtime_utc",
    "log_file": "tests/test_cli.py::test_log_file",
    "log_size_limit": "tests/test_logging.py::test_logfile_max_num_key_reaches_the_logger",
    "logfile_max_num": "tests/test_logging.py::test_logfile_max_num_key_reaches_the_logger",
    "syslog": "tests/test_logging.py::test_local_syslog_uses_the_daemon_facility",
    "remote_syslog": "tests/test_logging.py::test_remote_syslog_key_in_the_config_file",
    "authorization": "tests/test_auth.py::test_token_auth",
    "no_auth_user": "tests/test_auth.py::test_no_auth_user",
    "accounts": "tests/test_accounts.py",
    "system_account": "tests/test_sysacc.py::test_default_sys_account_and_no_system_account",
    "no_system_account": "tests/test_sysacc.py::test_no_system_account",
    "tls": "tests/test_tls_options.py",  # the TLS engineer's tests
    "ocsp": "tests/test_ocsp_staple.py::test_always_staples_good_and_keeps_a_copy",
    "ocsp_cache": "tests/test_ocsp.py::test_cache_used_and_saved",
    "allow_non_tls": "tests/test_monitor.py::test_https_monitor",
    "websocket": "tests/test_websocket.py::test_from_config_file",
    "jetstream": "tests/test_js_consumer.py::test_domain_and_v2_ack_subjects",
    "store_dir": "tests/test_js_durability.py::test_acked_messages_survive_sigkill",
    "mappings": "tests/test_mapping.py::test_config_mappings_applied_on_publish",
    "server_tags": f"{HERE}::test_server_tags_in_varz",
    "operator": "tests/test_operator.py::test_operator_asserts_server_version",
    "resolver": "tests/test_operator.py::test_full_dir_resolver_survives_restart",
    "resolver_preload": "tests/test_operator.py::test_operator_signing_keys_and_strict_usage",
    "resolver_tls": "tests/test_url_resolver.py::test_resolver_tls",
    "proxies": "tests/test_proxies.py::test_proxy_required_users",
    "resolver_pinned_accounts": "tests/test_operator.py::test_pinned_accounts",
    "trusted": "tests/test_operator.py::test_config_errors_at_parse",
    # not active until clustering lands: the server starts and warns, naming the block
    "cluster": "tests/test_cluster_routes.py::test_pub_sub_every_pair_both_ways_with_headers",
    "gateway": "tests/test_cluster_gateways.py::test_pub_sub_across_clusters_both_ways",
    "leafnodes": "tests/test_cluster_leaf.py::test_every_leafnodes_key_is_known",
    "connect_error_reports": "tests/test_cluster_routes.py::test_connect_error_reports",
    "reconnect_error_reports": "tests/test_cluster_routes.py::test_connect_error_reports",
    # jetstream {}
    "jetstream.store_dir": "tests/test_js_durability.py::test_acked_messages_survive_sigkill",
    "jetstream.sync_interval": "tests/test_js_stream.py::test_sync_always_acks_after_fsync",
    "jetstream.max_memory_store": "tests/test_monitor.py::test_jetstream_hook",
    "jetstream.max_file_store": f"{HERE}::test_jetstream_store_limits_reach_the_account",
    "jetstream.domain": "tests/test_js_consumer.py::test_domain_and_v2_ack_subjects",
    "jetstream.enabled": "tests/test_monitor.py::test_jetstream_hook",
    "jetstream.unique_tag": f"{HERE}::test_jetstream_store_limits_reach_the_account",
    "jetstream.limits": "tests/test_js_server_limits.py::test_server_limits_like_nats_server",
    "jetstream.key": "tests/test_js_encryption.py::test_encrypted_store_round_trip_and_wrong_key",
    "jetstream.prev_key": "tests/test_js_encryption.py::test_key_rotation_with_prev_key",
    "jetstream.cipher": "tests/test_js_encryption.py::test_config_keys_and_cipher_errors",
    "jetstream.max_outstanding_catchup": "tests/test_jscluster_catchup_budget.py::test_catch_up_within_budget",
    "jetstream.meta_compact": "tests/test_jscluster_meta_compact.py::test_meta_log_compacted_past_threshold",
    "jetstream.meta_compact_size": "tests/test_jscluster_meta_compact.py::test_meta_log_compacted_past_threshold",
    "jetstream.meta_compact_sync": "tests/test_jscluster_meta_compact.py::test_async_snapshots_refused",
    "jetstream.max_concurrent_io": "tests/test_js_concurrent_io.py::test_blocking_calls_in_flight_bounded",
    "jetstream.tpm": "tests/test_release_features.py::test_tpm_block_parsed_then_jetstream_refused_as_nats_server",
    "server_metadata": "tests/test_server_metadata.py::test_server_metadata_as_nats_server",
    "feature_flags": "tests/test_feature_flags.py::test_v2_ack_and_flow_control_subjects_like_nats_server",
    "jetstream.strict": "tests/test_operator.py::test_operator_signing_keys_and_strict_usage",
    # websocket {}
    "websocket.listen": "tests/test_websocket.py::test_from_config_file",
    "websocket.port": "tests/test_websocket.py::test_start_logs_and_addr",
    "websocket.host": "tests/test_websocket.py::test_start_logs_and_addr",
    "websocket.advertise": "tests/test_websocket.py::test_info_for_websocket_clients",
    "websocket.no_tls": "tests/test_websocket.py::test_requires_tls_unless_no_tls",
    "websocket.tls": "tests/test_websocket.py::test_wss_self_signed",
    "websocket.same_origin": "tests/test_websocket.py::test_same_origin",
    "websocket.allowed_origins": "tests/test_websocket.py::test_origin_checks",
    "websocket.handshake_timeout": "tests/test_websocket.py::test_handshake_timeout",
    "websocket.compression": "tests/test_websocket.py::test_compression_with_aiohttp_client",
    "websocket.authorization": "tests/test_websocket.py",
    "websocket.jwt_cookie": "tests/test_websocket.py",
    "websocket.user_cookie": "tests/test_websocket.py",
    "websocket.pass_cookie": "tests/test_websocket.py",
    "websocket.token_cookie": "tests/test_websocket.py",
    "websocket.no_auth_user": "tests/test_auth.py::test_no_auth_user",
    "websocket.headers": "tests/test_websocket.py::test_invalid_custom_headers_refused",
    "websocket.ping_interval": "tests/test_websocket.py",
    # authorization {}
    "authorization.user": "tests/test_auth.py::test_user_password",
    "authorization.pass": "tests/test_auth.py::test_user_password",
    "authorization.token": "tests/test_auth.py::test_token_auth",
    "authorization.timeout": "tests/test_cli.py::test_config_durations",
    "authorization.users": "tests/test_auth.py::test_users_list",
    "authorization.permissions": "tests/test_auth.py::test_allow_responses_once",
    "authorization.default_permissions": "tests/test_operator.py::test_account_default_permissions",
    "authorization.auth_callout": "tests/test_auth_callout.py",
    "authorization.proxy_required": "tests/test_config_options.py",
    # mqtt {}
    "mqtt": "tests/test_mqtt.py::test_connect_pub_sub_wildcards_all_qos",
    **{f"mqtt.{k}": "tests/test_mqtt_options.py::test_block_parsed_with_aliases" for k in ("listen", "port", "host")},
    "mqtt.tls": "tests/test_mqtt_options.py::test_tls",
    "mqtt.authorization": "tests/test_mqtt.py::test_token_auth",
    "mqtt.no_auth_user": "tests/test_mqtt_options.py::test_mqtt_no_auth_user",
    "mqtt.ack_wait": "tests/test_mqtt.py::test_qos1_redelivered_after_reconnect_with_dup",
    "mqtt.js_api_timeout": "tests/test_mqtt_options.py::test_stream_replicas_and_js_api_timeout",
    "mqtt.max_ack_pending": "tests/test_mqtt_options.py::test_consumer_settings",
    "mqtt.js_domain": "tests/test_mqtt_options.py::test_js_domain",
    "mqtt.stream_replicas": "tests/test_mqtt_options.py::test_stream_replicas_and_js_api_timeout",
    "mqtt.consumer_replicas": "tests/test_mqtt_options.py::test_errors_and_warnings",
    "mqtt.consumer_memory_storage": "tests/test_mqtt_options.py::test_consumer_settings",
    "mqtt.consumer_inactive_threshold": "tests/test_mqtt_options.py::test_consumer_settings",
    "mqtt.reject_qos2_publish": "tests/test_mqtt_options.py::test_reject_qos2_publish",
    "mqtt.downgrade_qos2_subscribe": "tests/test_mqtt_options.py::test_downgrade_qos2_subscribe",
    "mqtt.receive_maximum": "tests/test_mqtt_auth.py::test_mqtt5_receive_maximum_enforced_on_qos1",
    "mqtt.max_keep_alive": "tests/test_mqtt5.py::test_max_keep_alive_is_the_server_keep_alive",
}

# alias -> (the key it spells, a value both accept)
ALIASES: dict[str, tuple[str, str]] = {
    "net": ("host", '"127.0.0.2"'), "monitor": ("http", "8222"), "monitor_port": ("http_port", "8222"),
    "pidfile": ("pid_file", '"/tmp/x.pid"'), "max_conn": ("max_connections", "7"),
    "max_subs": ("max_subscriptions", "7"), "max_subscription_tokens": ("max_sub_tokens", "7"),
    "max_pings_outstanding": ("ping_max", "7"),
    "no_sublist_cache": ("disable_sublist_cache", "true"), "logfile": ("log_file", '"/tmp/x.log"'),
    "logfile_size_limit": ("log_size_limit", "1000"), "log_max_num": ("logfile_max_num", "3"),
    "system": ("system_account", "SYS"), "no_system": ("no_system_account", "true"),
    "no_sys_acc": ("no_system_account", "true"), "ws": ("websocket", "{ port: 8080, no_tls: true }"),
    "storedir": ("store_dir", '"/tmp/js"'), "leaf": ("leafnodes", "{ port: 7422 }"),
    "maps": ("mappings", '{ a: b }'), "trusted_keys": ("trusted", '["OAB"]'),
    "account_resolver": ("resolver", "MEMORY"), "accounts_resolver": ("resolver", "MEMORY"),
    **{k: ("operator", '"/nonexistent.jwt"') for k in ("operators", "root", "roots", "root_operator",
                                                       "root_operators")},
    "jetstream.store": ("jetstream.store_dir", '"/tmp/js"'), "jetstream.storedir": ("jetstream.store_dir", '"/tmp/js"'),
    "jetstream.sync": ("jetstream.sync_interval", "always"),
    "jetstream.ek": ("jetstream.key", '"k"'), "jetstream.encryption_key": ("jetstream.key", '"k"'),
    "jetstream.prev_ek": ("jetstream.prev_key", '"k"'), "jetstream.prev_encryption_key": ("jetstream.prev_key", '"k"'),
    "jetstream.max_mem_store": ("jetstream.max_memory_store", "1G"),
    "jetstream.max_mem": ("jetstream.max_memory_store", "1G"),
    "jetstream.max_file": ("jetstream.max_file_store", "1G"), "jetstream.enable": ("jetstream.enabled", "false"),
    "websocket.net": ("websocket.host", '"127.0.0.2"'), "websocket.compress": ("websocket.compression", "true"),
    "websocket.authentication": ("websocket.authorization", "{ token: t }"),
    **{f"websocket.{k}": ("websocket.allowed_origins", '["http://a"]')
       for k in ("allowed_origin", "allow_origins", "allow_origin", "origins", "origin")},
    "authorization.username": ("authorization.user", "u"), "authorization.password": ("authorization.pass", "p"),
    "authorization.default_permission": ("authorization.default_permissions", "{ publish: a }"),
    "mqtt.net": ("mqtt.host", '"127.0.0.2"'), "mqtt.authentication": ("mqtt.authorization", "{ token: t }"),
    "mqtt.ackwait": ("mqtt.ack_wait", '"5s"'), "mqtt.api_timeout": ("mqtt.js_api_timeout", '"5s"'),
    "mqtt.max_pending": ("mqtt.max_ack_pending", "7"), "mqtt.max_inflight": ("mqtt.max_ack_pending", "7"),
    "mqtt.consumer_auto_cleanup": ("mqtt.consumer_inactive_threshold", '"1m"'),
    "authorization.auth_hook": ("authorization.auth_callout",
                                "{ issuer: AABBCC, auth_users: [u] }"),
}

# flag destination -> a test showing what the flag does
FLAG_TESTS: dict[str, str] = {
    "help": "tests/test_cli.py::test_help", "version": "tests/test_cli.py::test_version",
    "help_tls": "tests/test_config_flags.py::test_help_tls", "config": "tests/test_cli.py::test_check_good_config",
    "test_config": "tests/test_cli.py::test_check_good_config",
    "signal": "tests/test_cli.py::test_signal_command_ldm_by_pid",
    "port": "tests/test_cli.py::test_fixed_port_and_name", "host": "tests/test_cli.py::test_fixed_port_and_name",
    "server_name": "tests/test_cli.py::test_fixed_port_and_name",
    "client_advertise": f"{HERE}::test_client_advertise_is_the_connect_url",
    "debug": "tests/test_cli.py::test_debug_and_trace_lines", "trace": "tests/test_cli.py::test_trace_redacts_password",
    "VV": "tests/test_config_flags.py::test_combined_logging_flags",
    "DV": "tests/test_cli.py::test_debug_and_trace_lines",
    "DVV": "tests/test_config_flags.py::test_combined_logging_flags",
    "logtime": f"{HERE}::test_logtime_and_logtime_utc", "logtime_utc": f"{HERE}::test_logtime_and_logtime_utc",
    "username": "tests/test_startup.py::test_tls_upgrade_in_the_real_server",
    "password": "tests/test_startup.py::test_tls_upgrade_in_the_real_server",
    "authorization": "tests/test_rcli_context.py::test_context_supplies_server_and_credentials",
    "http_port": "tests/test_mapping.py::test_partitions_stable_across_restart_and_same_as_go",
    "http_metrics": "tests/test_monitor_metrics.py::test_config_key_and_flag",
    "https_port": "tests/test_monitor.py::test_https_monitor",
    "pid_file": "tests/test_cli.py::test_pid_file",
    "ports_file_dir": "tests/test_cli.py::test_random_port_ports_file_and_log_lines",
    "log_file": "tests/test_cli.py::test_log_file",
    "log_size_limit": "tests/test_logging.py::test_log_file_rotates_at_the_size_limit_and_keeps_max_files",
    "syslog": "tests/test_logging.py::test_syslog_without_a_daemon_stops_the_server_like_nats_server",
    "remote_syslog": "tests/test_logging.py::test_remote_syslog_flag_sends_the_log_over_udp",
    "routes": "tests/test_inactive_cluster.py::test_flags_of_the_cluster_discovery_tests_start_routing",
    "cluster": "tests/test_inactive_cluster.py::test_flags_of_the_cluster_discovery_tests_start_routing",
    "cluster_name": "tests/test_inactive_cluster.py::test_flags_of_the_cluster_discovery_tests_start_routing",
    "cluster_advertise": "tests/test_inactive_cluster.py::test_flags_of_the_cluster_discovery_tests_start_routing",
    "no_advertise": "tests/test_inactive_cluster.py::test_flags_of_the_cluster_discovery_tests_start_routing",
    "connect_retries": "tests/test_inactive_cluster.py::test_flags_of_the_cluster_discovery_tests_start_routing",
    "tls": "tests/test_startup.py::test_tls_upgrade_in_the_real_server",
    "tlscert": "tests/test_startup.py::test_tls_upgrade_in_the_real_server",
    "tlskey": "tests/test_startup.py::test_tls_upgrade_in_the_real_server",
    "tlsverify": "tests/test_rcli_auth.py::test_tls_client_certificates",
    "tlscacert": "tests/test_rcli_auth.py::test_tls_client_certificates",
    "jetstream": "tests/test_js_ordered_restart.py::test_ordered_consumer_survives_restart",
    "store_dir": "tests/test_js_ordered_restart.py::test_ordered_consumer_survives_restart",
    "max_traced_msg_len": "tests/test_trace_payload.py::test_max_traced_msg_len_flag",
}
REFUSED_FLAGS = {"profile": ["--profile", "6060"]}

SECTIONS_SAMPLE = ('jetstream { store_dir: "/tmp/x" }\nwebsocket { port: 1, no_tls: true }\n'
                   'authorization { user: a, pass: b }\ncluster { name: x }\nmqtt { port: 1883 }\n')


def all_keys() -> list[str]:
    """Every key the builder dispatches: top level, and "section.key" for the sections it walks."""
    builder = _Builder(Options())
    keys = set(builder.top_handlers)
    builder.apply(parse_string(SECTIONS_SAMPLE, "sample.conf"))
    for section, names in builder.section_keys.items():
        if section in ("jetstream", "websocket", "authorization", "mqtt"):
            keys.update(f"{section}.{n}" for n in names)
    return sorted(keys)


def cluster_keys() -> list[str]:
    builder = _Builder(Options())
    builder.apply(parse_string(SECTIONS_SAMPLE, "sample.conf"))
    return sorted(builder.section_keys["cluster"])


def as_config(key: str, value: str) -> str:
    if "." in key:
        section, name = key.split(".", 1)
        return f"{section} {{ {name}: {value} }}\n"
    return f"{key}: {value}\n"


@lru_cache(maxsize=None)
def defined_functions(path: str) -> frozenset[str]:
    tree = ast.parse((TESTS.parent / path).read_text())
    return frozenset(n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def node_exists(node: str) -> bool:
    path, _, name = node.partition("::")
    if not (TESTS.parent / path).is_file():
        return False
    return not name or name.split("[")[0] in defined_functions(path)


def refusal(key: str) -> str | None:
    """The error loading ``key`` gives when it is refused as not supported (None when it loads)."""
    text = as_config(key, "1")
    try:
        load_string(text, "k.conf")
    except ConfigError as e:
        return str(e)
    return None


def load_result(text: str) -> object:
    """The Options a text gives, or its error without the position (alias and key differ in length)."""
    try:
        return load_string(text, "a.conf")
    except ConfigError as e:
        return re.sub(r"^a\.conf:\d+:\d+: ", "", str(e))


@pytest.mark.parametrize("key", all_keys())
def test_every_key_acts_or_is_refused(key):
    if key in KEY_TESTS:
        assert node_exists(KEY_TESTS[key]), f"{key}: {KEY_TESTS[key]} is not in the tests tree"
        return
    if key in ALIASES:
        canonical, value = ALIASES[key]
        assert canonical in KEY_TESTS, f"{key} is an alias of {canonical}, which has no test"
        assert load_result(as_config(key, value)) == load_result(as_config(canonical, value)), \
            f"{key} does not do what {canonical} does"
        return
    problem = refusal(key)
    assert problem is not None, (f"{key!r} is accepted but has no test in KEY_TESTS or ALIASES and is not "
                                 "refused: make it work (and name its test) or refuse it")
    # nats-server's columns: 0-based on the first line ("block { key" puts key after "block { ")
    where = "1:" + ("0" if "." not in key else str(len(key.split(".")[0]) + 3))
    assert re.match(rf'k\.conf:{where}: "{re.escape(key.split(".")[-1])}" is not supported: ', problem), problem


def test_the_maps_name_only_keys_the_builder_has():
    keys = set(all_keys())
    assert not set(KEY_TESTS) - keys, set(KEY_TESTS) - keys
    assert not set(ALIASES) - keys, set(ALIASES) - keys


# cluster {} keys -> a test showing what each does, or the test of its refusal (until supported)
CLUSTER_KEY_TESTS: dict[str, str] = {
    "name": "tests/test_cluster_routes.py::test_cluster_authorization_and_name_checks",
    "listen": "tests/test_cluster_routes.py::test_client_on_route_port_is_refused",
    "port": "tests/test_config_options.py::test_cluster_host_port",
    "host": "tests/test_config_options.py::test_cluster_host_port",
    "net": "tests/test_config_options.py::test_cluster_host_port",
    "authorization": "tests/test_cluster_routes.py::test_cluster_authorization_and_name_checks",
    "routes": "tests/test_cluster_routes.py::test_async_info_connect_urls_seen_by_nats_py",
    "tls": "tests/test_config_options.py::test_cluster_refused_until_supported",
    "advertise": "tests/test_cluster_routes.py::test_cluster_advertise_and_no_advertise",
    "cluster_advertise": "tests/test_cluster_routes.py::test_cluster_advertise_and_no_advertise",
    "no_advertise": "tests/test_cluster_routes.py::test_cluster_advertise_and_no_advertise",
    "connect_retries": "tests/test_cluster_routes.py::test_connect_error_reports",
    "connect_backoff": "tests/test_cluster_routes.py::test_connect_error_reports",
    "pool_size": "tests/test_config_options.py::test_cluster_refused_until_supported",
    "accounts": "tests/test_config_options.py::test_cluster_refused_until_supported",
    "compression": "tests/test_cluster_s2.py::test_route_compression_reload",
    "permissions": "tests/test_cluster_routes_reload.py::test_route_permissions_match_nats_server",
    "ping_interval": "tests/test_cluster_routes.py::test_route_pings_and_stale_route",
    "ping_max": "tests/test_cluster_routes.py::test_route_pings_and_stale_route",
    "write_deadline": "tests/test_cluster_routes.py::test_stalled_route_is_closed_at_the_cluster_write_deadline",
    "write_timeout": "tests/test_cluster_routes.py::test_route_write_timeout_policy_with_a_slow_reader",
}


@pytest.mark.parametrize("key", cluster_keys())
def test_every_cluster_key_acts_or_is_refused(key):
    assert key in CLUSTER_KEY_TESTS, f"cluster {key} has no test: make it work (and name its test) or refuse it"
    assert node_exists(CLUSTER_KEY_TESTS[key]), CLUSTER_KEY_TESTS[key]


# gateway {} keys (and those of an entry of its gateways list) -> a test showing what each does or its refusal
GW = "tests/test_cluster_gateways.py"
GATEWAY_KEY_TESTS: dict[str, str] = {
    "name": f"{GW}::test_pub_sub_across_clusters_both_ways",
    "listen": f"{GW}::test_gateway_block_parsed_with_defaults",
    "port": f"{GW}::test_gateway_credentials_and_retries_between_rillet_clusters",
    "host": f"{GW}::test_gateway_block_parsed_with_defaults",
    "net": f"{GW}::test_gateway_block_parsed_with_defaults",
    "authorization": f"{GW}::test_reject_unknown_and_authorization",
    "tls": f"{GW}::test_gateway_config_errors",
    "advertise": f"{GW}::test_reject_unknown_and_authorization",
    "connect_retries": f"{GW}::test_connect_retries_of_an_implicit_gateway",
    "connect_backoff": f"{GW}::test_connect_retries_of_an_implicit_gateway",
    "gateways": f"{GW}::test_three_clusters_learn_each_other_by_gossip",
    "reject_unknown": f"{GW}::test_reject_unknown_and_authorization",
    "reject_unknown_cluster": f"{GW}::test_reject_unknown_and_authorization",
    "write_deadline": f"{GW}::test_stalled_gateway_peer_is_closed_at_the_write_deadline",
    "write_timeout": "tests/test_write_timeout.py::test_policies_parse_where_nats_server_takes_them",
    "gateways.name": f"{GW}::test_three_clusters_learn_each_other_by_gossip",
    "gateways.url": f"{GW}::test_gateway_credentials_and_retries_between_rillet_clusters",
    "gateways.urls": f"{GW}::test_gateway_block_parsed_with_defaults",
    "gateways.tls": f"{GW}::test_gateway_config_errors",
}


def gateway_keys() -> list[str]:
    builder = _Builder(Options())
    builder.apply(parse_string('gateway { name: g, port: 1, gateways: [{name: h, url: "h:1"}] }', "g.conf"))
    return sorted(list(builder.section_keys["gateway"]) +
                  [f"gateways.{k}" for k in builder.section_keys["gateway.gateways"]])


@pytest.mark.parametrize("key", gateway_keys())
def test_every_gateway_key_acts_or_is_refused(key):
    assert key in GATEWAY_KEY_TESTS, f"gateway {key} has no test: make it work (and name its test) or refuse it"
    assert node_exists(GATEWAY_KEY_TESTS[key]), GATEWAY_KEY_TESTS[key]


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_every_flag_acts_or_is_refused(name):
    dest = FLAGS[name].dest
    if dest in REFUSED_FLAGS:
        with pytest.raises(UnsupportedFlag, match=r"is not supported: Rillet "):
            parse_command_line(REFUSED_FLAGS[dest])
        parse_command_line([f"--{dest}", "0"])  # the default value is accepted
        return
    assert dest in FLAG_TESTS, f"flag -{name} ({dest}) has no test in FLAG_TESTS and is not refused"
    assert node_exists(FLAG_TESTS[dest]), FLAG_TESTS[dest]


# ---- behaviour of keys no other test covers -------------------------------------------------------

async def test_client_advertise_is_the_connect_url():
    async with serve_config('listen: "127.0.0.1:-1"\nclient_advertise: "nats.example.com:4333"\n') as srv:
        assert srv.connect_urls() == ["nats.example.com:4333"]
    assert parse_command_line(["--client_advertise", "a:1"]).options.client_advertise == "a:1"


async def test_max_closed_clients_bounds_the_closed_list():
    async with serve_config('listen: "127.0.0.1:-1"\nmax_closed_clients: 1\n') as srv:
        assert srv.closed_clients.maxlen == 1


async def test_disable_sublist_cache():
    for text, cached in (("", 1), ("disable_sublist_cache: true\n", 0)):
        async with serve_config('listen: "127.0.0.1:-1"\n' + text) as srv:
            sl = srv.global_account.sublist
            sl.match("a.b")
            sl.match("a.b")
            assert sl.stats()["num_cache"] == cached


async def test_no_header_support_in_info():
    from helpers import RawClient
    async with serve_config('listen: "127.0.0.1:-1"\nno_header_support: true\n') as srv:
        async with await RawClient.open(srv, connect=False) as c:
            assert c.info["headers"] is False


def test_trace_verbose_and_trace_headers_turn_tracing_on():
    assert load_string("trace_verbose: true").trace is True
    assert load_string("trace_headers: true").trace is True
    assert load_string("trace_verbose: false").trace is False


def test_logtime_and_logtime_utc(tmp_path):
    from rillet.server.logging import Logger
    stamp = r"\d{4}/\d\d/\d\d (\d\d):\d\d:\d\d\.\d{6}"
    for text, pattern in (("logtime: false", rf"^\[{os.getpid()}\] \[INF\] hello$"),
                          ("logtime: true\nlogtime_utc: true", rf"^\[{os.getpid()}\] {stamp} \[INF\] hello$")):
        path = tmp_path / "l.log"
        path.unlink(missing_ok=True)
        log = Logger.from_options(load_string(f'log_file: "{path}"\n{text}\n'))
        log.notice("hello")
        log.close()
        line = path.read_text().strip()
        m = re.match(pattern, line)
        assert m, line
        if m.groups():
            assert int(m.group(1)) in {time.gmtime(time.time() - d).tm_hour for d in (0, 5)}


async def test_server_tags_in_varz():
    from rillet.server.procstats import CPUMeter
    from rillet.monitor.varz import varz
    async with serve_config('listen: "127.0.0.1:-1"\nserver_tags: ["Az:1", "b"]\n') as srv:
        assert varz(srv, {}, CPUMeter())["tags"] == ["az:1", "b"]


def test_jetstream_store_limits_reach_the_account():
    js = load_string('jetstream { max_file_store: "1G", unique_tag: "AZ" }').jetstream
    assert (js.max_file_store, js.unique_tag) == (1 << 30, "az")


def test_log_output_is_not_swallowed():
    buf = io.StringIO()
    from rillet.server.logging import Logger
    Logger(out=buf, logtime=False).warn("w")
    assert buf.getvalue().endswith("[WRN] w\n")
