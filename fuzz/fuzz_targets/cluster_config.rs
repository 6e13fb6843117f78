//! `seqsvr_core::config::ClusterConfig::from_toml_str`: the cluster file every process and
//! `seqctl` read at start (parse, then validate), from arbitrary UTF-8. Never panics; a config
//! that validates serializes (`to_toml_string`, which `seqctl` writes) and parses back equal;
//! what processes then ask of it (sections, routing, members, addresses, TLS identities) does
//! not panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use seqsvr_core::config::{default_listen, port_of, ClusterConfig};
use seqsvr_core::ids::NodeId;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = port_of(text);
    let _ = default_listen(text);
    let Ok(config) = ClusterConfig::from_toml_str(text) else { return };
    let written = config.to_toml_string();
    let back = ClusterConfig::from_toml_str(&written).unwrap_or_else(|e| {
        panic!("a valid config written out does not parse back: {e}\n{written}")
    });
    assert_eq!(back, config);
    for set in &config.sets {
        let sections = set.sections(config.section_size);
        assert!(sections.begin() <= sections.end());
        assert_eq!(config.set_for_uid(set.uid_begin).map(|s| s.id), Some(set.id));
        assert_eq!(config.set(set.id).map(|s| s.id), Some(set.id));
        for m in &set.stores {
            assert!(port_of(&m.addr).is_some());
            let _ = default_listen(&m.addr);
            assert_eq!(set.member(m.id).map(|x| x.id), Some(m.id));
        }
        let _ = set.member(NodeId(0));
        for a in &set.allocs {
            let _ = port_of(a);
        }
    }
    let _ = config.alloc.prefetch_remaining();
    if let Some(tls) = &config.tls {
        let _ = tls.store_server_name();
        let _ = tls.alloc_server_name();
        let names: Vec<String> = tls.identities.keys().take(4).cloned().collect();
        let _ = tls.resolve_identity(names.first().map(String::as_str), &names);
        let _ = tls.resolve_identity(None, &[]);
    }
});
