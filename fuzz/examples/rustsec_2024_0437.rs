//! RUSTSEC-2024-0437 against the parser raft 0.7 uses (protobuf 2.28) and against the wire
//! pre-check (`seqsvr_core::raft_wire`), on the advisory's input: an `eraftpb.Message` holding an
//! unknown field of `depth` start-group tags, then as many end-group tags. The plain parse runs
//! in a thread with a 64 KiB stack, so any recursion per group level would overflow it (and
//! abort this process, which is why this is an example and not a test).
//! Usage: `cargo run --example rustsec_2024_0437 [depth]` (default 1 000 000).

use protobuf::Message as _;

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn main() {
    let depth: usize = std::env::args().nth(1).map_or(1_000_000, |d| d.parse().expect("a depth"));
    let mut bytes = vec![0x08, 0x08]; // msg_type: MsgHeartbeat
    for _ in 0..depth {
        varint(100 << 3 | 3, &mut bytes); // field 100, start group
    }
    for _ in 0..depth {
        varint(100 << 3 | 4, &mut bytes); // field 100, end group
    }
    // Also one group nested inside a known nested message (Message.entries → Entry).
    let mut entry = Vec::new();
    for _ in 0..depth.min(10_000) {
        varint(50 << 3 | 3, &mut entry);
    }
    let mut in_entry = vec![0x3a];
    varint(entry.len() as u64, &mut in_entry);
    in_entry.extend_from_slice(&entry);

    for (name, input) in [("top-level groups", bytes), ("groups inside an entry", in_entry)] {
        println!("{name}: {} bytes", input.len());
        println!(
            "  raft_wire::check_message: {:?}",
            seqsvr_core::raft_wire::check_message(&input).map_err(|e| e.to_string())
        );
        let plain = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                raft::eraftpb::Message::parse_from_bytes(&input)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
            .expect("spawns")
            .join()
            .expect("the parse thread returns");
        println!("  protobuf 2.28 parse_from_bytes (64 KiB stack): {plain:?}");
    }
}
