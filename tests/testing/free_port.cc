#include "tests/testing/free_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <random>

#include "common/mutex.h"

namespace shardps::testing {

int FreePort() {
  static Mutex mu;
  static std::mt19937 rng(static_cast<uint32_t>(getpid()));  // Guarded by mu.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    int port;
    {
      MutexLock lock(&mu);
      port = 20000 + static_cast<int>(rng() % 12000);
    }
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    close(fd);
    if (ok) return port;
  }
  return 0;
}

}  // namespace shardps::testing
