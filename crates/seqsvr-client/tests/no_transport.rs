//! A process that chose no transport (neither `tls::set_process_tls` nor `tls::use_plaintext`)
//! opens no channel: every client of the SDK refuses at once, FAILED_PRECONDITION naming what to
//! configure, instead of dialling plaintext (issue 30). Its own test binary: the choice is
//! process-wide, and no other test may make it first.

use seqsvr_client::ids::IdClient;
use seqsvr_client::seq::SeqClient;
use seqsvr_client::store::StoreClient;
use seqsvr_core::ids::NodeId;
use std::time::Duration;
use tonic::Code;

fn says_what_to_configure(status: &tonic::Status) {
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    let m = status.message();
    assert!(m.contains("set_process_tls") && m.contains("use_plaintext"), "{m}");
}

#[tokio::test]
async fn without_a_chosen_transport_no_client_dials_and_each_says_what_to_configure() {
    // A listener that would accept a plaintext connection: nothing may reach it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();

    // Refused before anything is dialled (a dial would find a listener that never answers and
    // fail UNAVAILABLE once the deadline ran out).
    let err = SeqClient::connect(std::slice::from_ref(&addr), Duration::from_secs(2)).await.err();
    says_what_to_configure(&err.expect("SeqClient::connect without a transport"));
    says_what_to_configure(
        &IdClient::new(std::slice::from_ref(&addr)).err().expect("IdClient::new"),
    );
    let members = [(NodeId(1), addr.clone())];
    says_what_to_configure(&StoreClient::new(&members).err().expect("StoreClient::new"));
    says_what_to_configure(&seqsvr_client::store::alloc_channel(&addr).unwrap_err());

    // Nothing connected.
    let accepted = tokio::time::timeout(Duration::ZERO, listener.accept()).await;
    assert!(accepted.is_err(), "a client dialled without a transport");

    // Plaintext once chosen.
    seqsvr_client::tls::use_plaintext();
    let channel = seqsvr_client::store::alloc_channel(&addr).expect("plaintext, as chosen");
    drop(channel);
    assert!(StoreClient::new(&members).is_ok());
}
