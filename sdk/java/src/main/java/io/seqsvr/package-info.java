/**
 * The seqsvr Java SDK: {@link io.seqsvr.SeqsvrClient} (per-uid sequences and globally unique
 * ids from a seqsvr cluster over mutual TLS, with routing, retries and coalescing), its options
 * ({@link io.seqsvr.ClusterFile}, {@link io.seqsvr.ClientOptions}, {@link io.seqsvr.TlsFiles}),
 * its errors ({@link io.seqsvr.SeqsvrException}) and the pure id decoder
 * ({@link io.seqsvr.Decoder}, {@link io.seqsvr.LayoutSpec}, {@link io.seqsvr.Layout}).
 */
package io.seqsvr;
