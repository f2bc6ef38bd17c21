// FreePort: a TCP port on 127.0.0.1 that nothing listens on, for the
// processes a test or a bench starts on fixed addresses.
//
// The port is drawn at random from [20000, 32000), below Linux's ephemeral
// range (32768-60999): no outgoing connection of another test takes it
// while the process that owns it is down (a supervised server restarted on
// its address). Free when checked (bind succeeds); nothing holds it after.
// Thread-safe. Not test-only: bench/ uses it too.
#ifndef SHARDPS_TESTS_TESTING_FREE_PORT_H_
#define SHARDPS_TESTS_TESTING_FREE_PORT_H_

namespace shardps::testing {

// A free port, or 0 if 1000 draws found none.
int FreePort();

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_TESTING_FREE_PORT_H_
