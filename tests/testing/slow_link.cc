#include "tests/testing/slow_link.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace shardps::testing {

namespace {

int Loopback(int port, sockaddr_in* addr) {
  *addr = sockaddr_in{};
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr->sin_port = htons(static_cast<uint16_t>(port));
  return socket(AF_INET, SOCK_STREAM, 0);
}

}  // namespace

SlowLink::SlowLink(int target_port, absl::Duration delay)
    : target_port_(target_port), delay_(delay) {
  sockaddr_in addr;
  listen_fd_ = Loopback(0, &addr);
  socklen_t len = sizeof addr;
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listen_fd_, 16) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return;
  }
  address_ = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));
  acceptor_ = std::thread([this] { Accept(); });
}

SlowLink::~SlowLink() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  {
    absl::MutexLock lock(&mu_);
    for (int fd : fds_) shutdown(fd, SHUT_RDWR);
  }
  for (std::thread& t : pumps_) t.join();
  for (int fd : fds_) close(fd);
  if (listen_fd_ >= 0) close(listen_fd_);
}

void SlowLink::Accept() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;  // Looks at stop_ every 50 ms.
    const int client = accept(listen_fd_, nullptr, nullptr);
    if (client < 0) continue;
    sockaddr_in addr;
    const int server = Loopback(target_port_, &addr);
    if (server < 0 || connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close(client);
      if (server >= 0) close(server);
      continue;
    }
    int one = 1;
    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    absl::MutexLock lock(&mu_);
    fds_.push_back(client);
    fds_.push_back(server);
    pumps_.emplace_back([this, client, server] { Pump(client, server); });
    pumps_.emplace_back([this, client, server] { Pump(server, client); });
  }
}

void SlowLink::Pump(int from, int to) {
  char buf[65536];
  while (true) {
    const ssize_t n = read(from, buf, sizeof buf);
    if (n <= 0) break;
    absl::SleepFor(delay_);
    ssize_t sent = 0;
    while (sent < n) {
      const ssize_t w = send(to, buf + sent, n - sent, MSG_NOSIGNAL);
      if (w <= 0) break;
      sent += w;
    }
    if (sent < n) break;
  }
  // The other direction ends too: the peer sees the connection close.
  shutdown(from, SHUT_RDWR);
  shutdown(to, SHUT_RDWR);
}

}  // namespace shardps::testing
