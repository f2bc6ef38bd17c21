// A slow network link for tests: a TCP proxy on 127.0.0.1 that forwards each
// connection to a target port and holds every chunk of bytes, in both
// directions, for a fixed delay before passing it on. A connection's setup
// (TCP, a TLS handshake, HTTP/2's settings) then takes a few times the delay,
// as over a long or congested link.
//
// Thread-safety: construct, read address(), destroy; the destructor closes
// every connection and joins its threads.
#ifndef SHARDPS_TESTS_TESTING_SLOW_LINK_H_
#define SHARDPS_TESTS_TESTING_SLOW_LINK_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardps::testing {

class SlowLink {
 public:
  // Forwards to 127.0.0.1:`target_port`. address() is empty if the proxy
  // could not listen.
  SlowLink(int target_port, absl::Duration delay);
  ~SlowLink();
  SlowLink(const SlowLink&) = delete;
  SlowLink& operator=(const SlowLink&) = delete;

  // "127.0.0.1:<port>" the proxy listens on.
  const std::string& address() const { return address_; }

 private:
  void Accept();
  // Copies `from` to `to`, each chunk after the delay, until either ends.
  void Pump(int from, int to);

  const int target_port_;
  const absl::Duration delay_;
  int listen_fd_ = -1;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  absl::Mutex mu_;
  std::vector<int> fds_;  // Every connection's sockets, closed at the end.
  std::vector<std::thread> pumps_;
};

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_TESTING_SLOW_LINK_H_
