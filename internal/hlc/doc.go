// Package hlc implements the hybrid logical clock of Kulkarni, Demirbas,
// Madappa, Avva and Leone, "Logical Physical Clocks and Consistent
// Snapshots in Globally Distributed Databases" (2014).
//
// A hybrid logical clock issues Timestamps that behave like Lamport clocks
// (if event e happened before event f, then e's stamp is smaller than f's)
// while staying close to physical time: a stamp's WallTime is never below
// the local physical clock at the moment it was issued, and never more than
// the clock's maximum offset above it. The Logical counter breaks ties
// between events that share a WallTime.
//
// A process keeps one Clock. It calls Now for every local event and for
// every message it sends (attaching the stamp to the message), and Update
// for every stamp it receives. Update refuses a stamp whose WallTime is
// more than the maximum offset ahead of the local physical clock: merging
// it would drag this clock, and everything it later stamps, away from real
// time because of one faulty peer.
package hlc
