// The HTTP side of `serve`, on Boost.Beast: the only translation unit that
// includes Beast or Asio (they are heavy to compile), and the only one of
// llmc built with exceptions (CMakeLists.txt: Beast throws in places that
// cannot be configured away). Every call here takes an error_code instead.
#include "runtime/Serve/Server.h"

#include "runtime/Serve/Completions.h"
#include "runtime/Serve/Scheduler.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <ctime>
#include <functional>
#include <random>
#include <sstream>
#include <map>
#include <thread>

using namespace llmc;
using namespace llmc::serve;

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

using Request = http::request<http::string_body>;

using Clock = std::chrono::steady_clock;

/// How often a connection waiting for tokens looks whether its client left.
constexpr std::chrono::milliseconds kPollInterval(50);
/// Refused connections whose lingering close may run at once; beyond it a
/// refused connection is closed without its 503.
constexpr int64_t kMaxLingeringRefusals = 1024;
/// The largest request header.
constexpr uint32_t kHeaderLimit = 16 * 1024;

Clock::duration toDuration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(seconds));
}

/// Waits until `fd` is ready for `events` (or hung up, which the next read
/// or write reports) or `deadline` passes: then false, `ec` timed_out.
bool waitReady(int fd, short events, Clock::time_point deadline,
               beast::error_code &ec) {
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - Clock::now())
                    .count();
    if (left <= 0) {
      ec = net::error::timed_out;
      return false;
    }
    pollfd entry{fd, events, 0};
    int ready = ::poll(&entry, 1, int(std::min<int64_t>(left + 1, 60000)));
    if (ready > 0)
      return true;
    if (ready < 0 && errno != EINTR) {
      ec = beast::error_code(errno, boost::system::system_category());
      return false;
    }
  }
}

/// A connection's non-blocking socket as Beast's synchronous reads and
/// writes see it: a read that must wait waits until `readDeadline`, a
/// write until
/// `requestDeadline` or for `stall` without progress (a client that does
/// not read), then ends with net::error::timed_out. Without deadlines a
/// client that sends nothing, or never reads, would hold its thread and
/// connection forever.
class TimedStream {
public:
  using executor_type = tcp::socket::executor_type;

  TimedStream(tcp::socket &socket, Clock::duration stall)
      : socket(socket), stall(stall) {}
  executor_type get_executor() { return socket.get_executor(); }
  int fd() { return socket.native_handle(); }

  template <class Buffers>
  size_t read_some(const Buffers &buffers, beast::error_code &ec) {
    while (true) {
      size_t got = socket.read_some(buffers, ec);
      if (ec != net::error::would_block && ec != net::error::try_again)
        return got;
      ec = {};
      if (!waitReady(fd(), POLLIN, readDeadline, ec))
        return 0;
    }
  }
  template <class Buffers> size_t read_some(const Buffers &buffers) {
    beast::error_code ec;
    size_t got = read_some(buffers, ec);
    if (ec)
      throw beast::system_error(ec);
    return got;
  }
  template <class Buffers>
  size_t write_some(const Buffers &buffers, beast::error_code &ec) {
    while (true) {
      size_t sent = socket.write_some(buffers, ec);
      if (ec != net::error::would_block && ec != net::error::try_again)
        return sent;
      ec = {};
      Clock::time_point deadline =
          std::min(requestDeadline, Clock::now() + stall);
      if (!waitReady(fd(), POLLOUT, deadline, ec))
        return 0;
    }
  }
  template <class Buffers> size_t write_some(const Buffers &buffers) {
    beast::error_code ec;
    size_t sent = write_some(buffers, ec);
    if (ec)
      throw beast::system_error(ec);
    return sent;
  }

  tcp::socket &socket;
  Clock::time_point readDeadline = Clock::time_point::max();
  Clock::time_point requestDeadline = Clock::time_point::max();

private:
  Clock::duration stall;
};

int64_t unixSeconds() { return int64_t(std::time(nullptr)); }

/// Whether the peer closed (or reset) the connection: readable with
/// nothing to read. A client that sent its request and then shut down its
/// writing side counts as gone too.
bool peerClosed(tcp::socket &socket) {
  pollfd entry{socket.native_handle(), POLLIN | POLLRDHUP, 0};
  if (::poll(&entry, 1, 0) <= 0)
    return false;
  if (entry.revents & (POLLERR | POLLHUP | POLLRDHUP))
    return true;
  char byte;
  ssize_t got =
      ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return got == 0 ||
         (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/// Closes after a response sent before the request was read whole: stop
/// sending, then read what the client still sends (a bounded amount, for a
/// bounded time) so the close does not reset the connection before the
/// client reads the response.
void lingeringClose(tcp::socket &socket) {
  beast::error_code ec;
  socket.shutdown(tcp::socket::shutdown_send, ec);
  char sink[16384];
  size_t total = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (total < (64u << 20) && std::chrono::steady_clock::now() < deadline) {
    pollfd entry{socket.native_handle(), POLLIN, 0};
    if (::poll(&entry, 1, 200) <= 0)
      continue;
    ssize_t got = ::recv(socket.native_handle(), sink, sizeof(sink), 0);
    if (got <= 0)
      break;
    total += size_t(got);
  }
  socket.close(ec);
}

/// "cmpl-" and 24 hex digits: a random prefix per server, then a count.
class CompletionIds {
public:
  CompletionIds() {
    std::random_device device;
    prefix = (uint64_t(device()) << 32) | device();
  }
  std::string next() {
    return llvm::formatv("cmpl-{0:x-16}{1:x-8}", prefix,
                         uint32_t(count.fetch_add(1)))
        .str();
  }

private:
  uint64_t prefix;
  std::atomic<uint64_t> count{0};
};

class Server {
public:
  Server(runtime::CachedGenerator &generator, const TextCodec &tokenizer,
         const ServeOptions &options)
      : generator(generator), tokenizer(tokenizer), options(options),
        scheduler(generator, options.queueLimit), acceptor(io),
        signals(io), poll(io) {}

  llvm::Error run();

private:
  void accept();
  void watchStopFlag();
  void stopAccepting();
  /// Starts a connection's thread, closing the connection that has waited
  /// longest for a request to make room at the limit, or refuses it.
  void admit(tcp::socket socket);
  /// Closes the connection that has waited longest for a request (not
  /// running one); false when every connection is running a request.
  bool evictLongestWaiting();
  /// Answers 503 with `message` and closes, on the event loop: the write,
  /// then a lingering close bounded in time and bytes.
  void refuse(tcp::socket socket, const std::string &message);
  /// A connection's thread: requests one after another (keep-alive).
  void connection(tcp::socket socket);
  /// Reads the next request into `parser`, with the header and idle
  /// deadlines; false (the connection closes) when none came whole.
  bool readRequest(TimedStream &stream, beast::flat_buffer &buffer,
                   http::request_parser<http::string_body> &parser,
                   bool first, Clock::time_point connected);
  void setRunning(int fd, bool running);
  /// Answers one request; false when the connection must close.
  bool respond(TimedStream &socket, const Request &request);
  bool complete(TimedStream &socket, const Request &request);
  bool sendJson(TimedStream &socket, const Request &request,
                http::status status, std::string body,
                llvm::StringRef allow = "");
  bool sendError(TimedStream &socket, const Request &request,
                 http::status status, llvm::StringRef type,
                 llvm::StringRef message, llvm::StringRef allow = "");

  /// The end of a completion as its connection saw it.
  struct Outcome {
    FinishReason reason = FinishReason::Length;
    std::string error;
    bool clientGone = false;
    bool timedOut = false;
  };
  /// Reads `stream` until the request ends, passing each piece of final
  /// text to `emit` (false: the client is gone). Cancels the request when
  /// a stop string is found, the client leaves or its time is up.
  Outcome follow(RequestStream &stream, TimedStream &socket,
                 CompletionText &text, Usage &usage,
                 llvm::function_ref<bool(const std::string &)> emit);

  runtime::CachedGenerator &generator;
  const TextCodec &tokenizer;
  const ServeOptions &options;
  Scheduler scheduler;
  CompletionIds ids;
  int64_t started = unixSeconds();
  std::atomic<bool> stopping{false};

  net::io_context io;
  tcp::acceptor acceptor;
  net::signal_set signals;
  net::steady_timer poll;
  net::steady_timer acceptRetry{io};

  /// An open connection, by its socket's descriptor.
  struct Open {
    std::string address;
    /// Running a request (read whole, its response not yet written).
    bool running = false;
    /// Shut down to make room; its thread is closing it.
    bool evicted = false;
    /// When it began waiting for its next request.
    Clock::time_point waitingSince;
  };
  // Open connections, to wake them at shutdown and choose whom to close at
  // the limit; a thread closes its socket under the lock so that its
  // descriptor is not reused by a new connection while still listed.
  std::mutex connectionsMutex;
  std::condition_variable connectionsDone;
  std::map<int, Open> connections;
  std::map<std::string, int64_t> perAddress;
  int64_t evictedOpen = 0;
  /// Refusals whose lingering close runs (event loop only).
  int64_t lingering = 0;

  /// For the summary at the end.
  std::atomic<int64_t> accepted{0}, evictions{0}, refusedFull{0},
      refusedPerClient{0}, timeouts{0};
};

llvm::Error Server::run() {
  beast::error_code ec;
  net::ip::address address = net::ip::make_address(options.host, ec);
  if (ec)
    return llvm::createStringError("serve: '" + options.host +
                                   "' is not an IP address");
  tcp::endpoint endpoint(address, options.port);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec)
    acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    acceptor.bind(endpoint, ec);
  if (!ec)
    acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return llvm::createStringError(llvm::formatv(
        "serve: cannot listen on {0}:{1}: {2}", options.host, options.port,
        ec.message()));
  uint16_t port = acceptor.local_endpoint(ec).port();
  llvm::outs() << llvm::formatv(
      "llmc: serving {0} on http://{1}:{2} (batch {3}, context {4}, prefill "
      "chunk {5}, queue limit {6})\n",
      options.modelName, options.host, port, generator.batch(),
      generator.maxContext(), generator.prefillChunk(), options.queueLimit);
  llvm::outs().flush();

  std::thread schedulerThread([&] { scheduler.run(); });
  if (options.handleSignals) {
    signals.add(SIGINT, ec);
    signals.add(SIGTERM, ec);
    signals.async_wait([&](const beast::error_code &error, int signal) {
      if (error)
        return;
      llvm::errs() << "llmc: " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
                   << ": stopping the server\n";
      stopAccepting();
    });
  }
  watchStopFlag();
  accept();
  io.run();

  // Stopped: requests in flight end with an error, then connections close
  // (reading sides first, so responses being written still go out).
  stopping = true;
  scheduler.stop();
  schedulerThread.join();
  std::unique_lock<std::mutex> lock(connectionsMutex);
  for (const auto &entry : connections)
    ::shutdown(entry.first, SHUT_RD);
  if (!connectionsDone.wait_for(lock, std::chrono::seconds(5),
                                [&] { return connections.empty(); })) {
    for (const auto &entry : connections)
      ::shutdown(entry.first, SHUT_RDWR);
    connectionsDone.wait(lock, [&] { return connections.empty(); });
  }
  SchedulerStats stats = scheduler.stats();
  llvm::errs() << llvm::format(
      "llmc: served %lld completion(s) (%lld cancelled, %lld failed, %lld "
      "rejected): %lld prompt and %lld generated tokens; %lld decode steps "
      "at %.1f%% batch occupancy, at most %lld of %lld requests at once; "
      "%lld prefill passes\n",
      (long long)stats.completed, (long long)stats.cancelled,
      (long long)stats.failed, (long long)stats.rejected,
      (long long)stats.promptTokens, (long long)stats.generatedTokens,
      (long long)stats.decodeSteps,
      stats.decodeSteps ? 100.0 * double(stats.decodeRows) /
                              double(stats.decodeSteps * stats.batch)
                        : 0.0,
      (long long)stats.maxActive, (long long)stats.batch,
      (long long)stats.prefillPasses);
  llvm::errs() << llvm::formatv(
      "llmc: {0} connection(s) accepted: {1} closed to make room, {2} "
      "refused at the limit, {3} over the per-client cap, {4} timed out\n",
      accepted.load(), evictions.load(), refusedFull.load(),
      refusedPerClient.load(), timeouts.load());
  return llvm::Error::success();
}

void Server::stopAccepting() {
  beast::error_code ec;
  acceptor.close(ec);
  signals.cancel(ec);
  poll.cancel();
}

void Server::watchStopFlag() {
  if (!options.stop)
    return;
  poll.expires_after(std::chrono::milliseconds(100));
  poll.async_wait([&](const beast::error_code &error) {
    if (error)
      return;
    if (options.stop->load())
      return stopAccepting();
    watchStopFlag();
  });
}

void Server::accept() {
  acceptor.async_accept([&](const beast::error_code &error,
                            tcp::socket socket) {
    if (error == net::error::operation_aborted || !acceptor.is_open())
      return;
    if (error) {
      // Out of descriptors (EMFILE) and the like: the connection waits in
      // the backlog; try again shortly instead of spinning on the error.
      acceptRetry.expires_after(std::chrono::milliseconds(50));
      acceptRetry.async_wait([&](const beast::error_code &cancelled) {
        if (!cancelled && acceptor.is_open())
          accept();
      });
      return;
    }
    admit(std::move(socket));
    accept();
  });
}

void Server::admit(tcp::socket socket) {
  beast::error_code ec;
  tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec)
    return; // gone already
  ++accepted;
  std::string address = peer.address().to_string();
  std::string refusal;
  {
    std::lock_guard<std::mutex> lock(connectionsMutex);
    auto fromAddress = perAddress.find(address);
    int64_t open = fromAddress == perAddress.end() ? 0 : fromAddress->second;
    if (options.maxConnectionsPerClient > 0 &&
        open >= options.maxConnectionsPerClient) {
      ++refusedPerClient;
      refusal = llvm::formatv("too many open connections from {0} (the "
                              "limit is {1} per client)",
                              address, options.maxConnectionsPerClient)
                    .str();
    } else if (int64_t(connections.size()) - evictedOpen >=
                   options.maxConnections &&
               !evictLongestWaiting()) {
      ++refusedFull;
      refusal = llvm::formatv("too many open connections, all running "
                              "requests (the limit is {0})",
                              options.maxConnections)
                    .str();
    } else {
      int fd = socket.native_handle();
      connections[fd] = Open{address, false, false, Clock::now()};
      ++perAddress[address];
      try {
        std::thread(&Server::connection, this, std::move(socket)).detach();
      } catch (const std::system_error &) {
        connections.erase(fd);
        if (--perAddress[address] == 0)
          perAddress.erase(address);
        refusal = "cannot start a connection thread";
      }
    }
  }
  if (!refusal.empty())
    refuse(std::move(socket), refusal);
}

bool Server::evictLongestWaiting() {
  auto longest = connections.end();
  for (auto it = connections.begin(); it != connections.end(); ++it)
    if (!it->second.running && !it->second.evicted &&
        (longest == connections.end() ||
         it->second.waitingSince < longest->second.waitingSince))
      longest = it;
  if (longest == connections.end())
    return false;
  // Its thread's read or poll wakes up and closes the connection.
  ::shutdown(longest->first, SHUT_RDWR);
  longest->second.evicted = true;
  ++evictedOpen;
  ++evictions;
  return true;
}

void Server::refuse(tcp::socket socket, const std::string &message) {
  beast::error_code ec;
  if (!socket.is_open())
    return;
  if (lingering >= kMaxLingeringRefusals) {
    socket.close(ec);
    return;
  }
  struct Refusal {
    Refusal(tcp::socket socket, net::io_context &io)
        : socket(std::move(socket)), timer(io) {}
    tcp::socket socket;
    net::steady_timer timer;
    std::string response;
    std::array<char, 4096> sink;
    size_t drained = 0;
    bool done = false;
  };
  auto refusal = std::make_shared<Refusal>(std::move(socket), io);
  http::response<http::string_body> response{
      http::status::service_unavailable, 11};
  response.set(http::field::server, "llmc");
  response.set(http::field::content_type, "application/json");
  response.keep_alive(false);
  response.body() = errorJson("overloaded_error", message);
  response.prepare_payload();
  std::ostringstream text;
  text << response;
  refusal->response = text.str();
  ++lingering;
  auto finish = [this](const std::shared_ptr<Refusal> &refusal) {
    if (refusal->done)
      return;
    refusal->done = true;
    --lingering;
    beast::error_code ignored;
    refusal->timer.cancel();
    refusal->socket.close(ignored);
  };
  // The close waits for the client's request to be read (else the close
  // resets the connection before the client reads the 503), for at most
  // 2 s and 1 MiB.
  refusal->timer.expires_after(std::chrono::seconds(2));
  refusal->timer.async_wait([refusal, finish](const beast::error_code &error) {
    if (!error)
      finish(refusal);
  });
  auto drain = std::make_shared<std::function<void()>>();
  *drain = [refusal, finish, drain]() {
    refusal->socket.async_read_some(
        net::buffer(refusal->sink),
        [refusal, finish, drain](const beast::error_code &error, size_t got) {
          refusal->drained += got;
          if (error || refusal->drained > (1u << 20)) {
            finish(refusal);
            *drain = nullptr; // breaks the cycle
            return;
          }
          (*drain)();
        });
  };
  net::async_write(refusal->socket, net::buffer(refusal->response),
                   [refusal, finish, drain](const beast::error_code &error,
                                            size_t) {
                     if (error) {
                       finish(refusal);
                       *drain = nullptr;
                       return;
                     }
                     beast::error_code ignored;
                     refusal->socket.shutdown(tcp::socket::shutdown_send,
                                              ignored);
                     (*drain)();
                   });
}

void Server::setRunning(int fd, bool running) {
  std::lock_guard<std::mutex> lock(connectionsMutex);
  auto it = connections.find(fd);
  if (it == connections.end())
    return;
  it->second.running = running;
  if (!running)
    it->second.waitingSince = Clock::now();
}

bool Server::readRequest(TimedStream &stream, beast::flat_buffer &buffer,
                         http::request_parser<http::string_body> &parser,
                         bool first, Clock::time_point connected) {
  Clock::duration headerTime = toDuration(options.headerTimeoutSeconds);
  beast::error_code ec;
  // A kept-alive connection waits up to the idle timeout for the first
  // byte of its next request; the first request's header time counts from
  // the connection.
  Clock::time_point headerDeadline = connected + headerTime;
  if (!first) {
    if (buffer.size() == 0 &&
        !waitReady(stream.fd(), POLLIN,
                   Clock::now() + toDuration(options.idleTimeoutSeconds),
                   ec)) {
      if (ec == net::error::timed_out)
        ++timeouts;
      return false;
    }
    headerDeadline = Clock::now() + headerTime;
  }
  stream.readDeadline = headerDeadline;
  http::read_header(stream, buffer, parser, ec);
  bool headerDone = !ec;
  if (headerDone) {
    stream.requestDeadline =
        Clock::now() + toDuration(options.requestTimeoutSeconds);
    stream.readDeadline = stream.requestDeadline;
    if (!parser.is_done())
      http::read(stream, buffer, parser, ec);
  }
  if (!ec)
    return true;
  if (ec == http::error::end_of_stream || stopping)
    return false;
  Request reply;
  reply.version(11);
  reply.keep_alive(false);
  if (ec == net::error::timed_out) {
    ++timeouts;
    // Nothing sent at all: closed without a word, as a keep-alive is.
    if (!parser.got_some() && buffer.size() == 0)
      return false;
    sendError(stream, reply, http::status::request_timeout,
              "invalid_request_error",
              headerDone
                  ? llvm::formatv("the request's body did not arrive within "
                                  "the server's {0} s limit of a request",
                                  options.requestTimeoutSeconds)
                        .str()
                  : llvm::formatv("the request's header did not arrive "
                                  "within {0} s",
                                  options.headerTimeoutSeconds)
                        .str());
    lingeringClose(stream.socket);
    return false;
  }
  if (ec == http::error::body_limit || ec == http::error::header_limit) {
    bool body = ec == http::error::body_limit;
    Request request = parser.get();
    request.keep_alive(false);
    sendError(stream, request,
              body ? http::status::payload_too_large
                   : http::status::request_header_fields_too_large,
              "invalid_request_error",
              body ? llvm::formatv("the body is over the limit of {0} "
                                   "bytes",
                                   options.maxBodyBytes)
                         .str()
                   : "the request's header is over 16 KiB");
    lingeringClose(stream.socket);
    return false;
  }
  // A request that is not HTTP gets a 400; a broken connection nothing.
  if (ec.category() ==
      http::make_error_code(http::error::bad_target).category()) {
    sendError(stream, reply, http::status::bad_request,
              "invalid_request_error",
              "malformed HTTP request: " + ec.message());
    lingeringClose(stream.socket);
  }
  return false;
}

void Server::connection(tcp::socket socket) {
  Clock::time_point connected = Clock::now();
  int fd = socket.native_handle();
  beast::error_code ec;
  socket.non_blocking(true, ec);
  TimedStream stream(socket, toDuration(options.idleTimeoutSeconds));
  beast::flat_buffer buffer;
  for (bool first = true; !ec; first = false) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(options.maxBodyBytes);
    parser.header_limit(kHeaderLimit);
    stream.requestDeadline = Clock::time_point::max();
    if (!readRequest(stream, buffer, parser, first, connected))
      break;
    setRunning(fd, true);
    bool more = respond(stream, parser.get()) && parser.get().keep_alive();
    setRunning(fd, false);
    if (!more)
      break;
  }
  socket.shutdown(tcp::socket::shutdown_both, ec);
  std::lock_guard<std::mutex> lock(connectionsMutex);
  socket.close(ec);
  auto it = connections.find(fd);
  if (it != connections.end()) {
    if (it->second.evicted)
      --evictedOpen;
    auto fromAddress = perAddress.find(it->second.address);
    if (fromAddress != perAddress.end() && --fromAddress->second <= 0)
      perAddress.erase(fromAddress);
    connections.erase(it);
  }
  connectionsDone.notify_all();
}

bool Server::respond(TimedStream &socket, const Request &request) {
  llvm::StringRef target(request.target().data(), request.target().size());
  target = target.take_until([](char c) { return c == '?'; });
  struct Route {
    llvm::StringRef path;
    http::verb method;
  };
  static const Route routes[] = {{"/v1/completions", http::verb::post},
                                 {"/v1/models", http::verb::get},
                                 {"/health", http::verb::get}};
  for (const Route &route : routes) {
    if (target != route.path)
      continue;
    if (request.method() != route.method)
      return sendError(
          socket, request, http::status::method_not_allowed,
          "invalid_request_error",
          llvm::formatv("{0} takes {1}, not {2}", route.path,
                        std::string(http::to_string(route.method)),
                        std::string(request.method_string()))
              .str(),
          std::string(http::to_string(route.method)));
    if (route.method == http::verb::post)
      return complete(socket, request);
    if (route.path == "/v1/models")
      return sendJson(socket, request, http::status::ok,
                      modelsJson(options.modelName, started));
    return sendJson(socket, request, http::status::ok,
                    healthJson(options.modelName, scheduler.stats()));
  }
  return sendError(socket, request, http::status::not_found,
                   "not_found_error",
                   llvm::formatv("no such path: {0} (paths: /v1/completions, "
                                 "/v1/models, /health)",
                                 target)
                       .str());
}

bool Server::sendJson(TimedStream &socket, const Request &request,
                      http::status status, std::string body,
                      llvm::StringRef allow) {
  http::response<http::string_body> response{status, request.version()};
  response.set(http::field::server, "llmc");
  response.set(http::field::content_type, "application/json");
  if (!allow.empty())
    response.set(http::field::allow, std::string(allow));
  response.keep_alive(request.keep_alive());
  response.body() = std::move(body);
  response.prepare_payload();
  beast::error_code ec;
  http::write(socket, response, ec);
  return !ec;
}

bool Server::sendError(TimedStream &socket, const Request &request,
                       http::status status, llvm::StringRef type,
                       llvm::StringRef message, llvm::StringRef allow) {
  return sendJson(socket, request, status, errorJson(type, message), allow);
}

Server::Outcome
Server::follow(RequestStream &stream, TimedStream &socket, CompletionText &text,
               Usage &usage,
               llvm::function_ref<bool(const std::string &)> emit) {
  while (true) {
    if (Clock::now() >= socket.requestDeadline) {
      stream.cancel();
      // The answer saying so is bounded by the write stall alone.
      socket.requestDeadline = Clock::time_point::max();
      return {FinishReason::Failed,
              llvm::formatv("the request ran past the server's limit of {0} "
                            "s (--request-timeout)",
                            options.requestTimeoutSeconds)
                  .str(),
              false, true};
    }
    std::optional<RequestStream::Event> event = stream.next(kPollInterval);
    if (!event) {
      if (peerClosed(socket.socket)) {
        stream.cancel();
        return {FinishReason::Cancelled, "", true};
      }
      continue;
    }
    if (!event->token)
      return {event->reason, event->error, false};
    ++usage.completionTokens;
    std::string piece = text.add(*event->token);
    if (!piece.empty() && !emit(piece)) {
      stream.cancel();
      return {FinishReason::Cancelled, "", true};
    }
    if (text.stopped()) {
      stream.cancel();
      return {FinishReason::Stop, "", false};
    }
  }
}

bool Server::complete(TimedStream &socket, const Request &request) {
  auto refuse = [&](llvm::Error error) {
    bool sent = false;
    llvm::handleAllErrors(
        std::move(error),
        [&](const ApiError &api) {
          sent = sendError(socket, request, http::status(api.status),
                           api.type, api.message);
        },
        [&](const llvm::ErrorInfoBase &other) {
          sent = sendError(socket, request,
                           http::status::internal_server_error,
                           "server_error", other.message());
        });
    return sent;
  };
  llvm::Expected<CompletionParams> params =
      parseCompletionRequest(request.body());
  if (!params)
    return refuse(params.takeError());
  llvm::Expected<GenerationRequest> generation =
      makeGenerationRequest(*params, tokenizer, generator.maxContext());
  if (!generation)
    return refuse(generation.takeError());
  Usage usage;
  usage.promptTokens = generation->prompt.size();
  Scheduler::Submitted submitted = scheduler.submit(std::move(*generation));
  if (!submitted.stream)
    return refuse(
        submitted.rejection == Scheduler::Submitted::Invalid
            ? invalidRequest(submitted.message)
            : llvm::make_error<ApiError>(503, "overloaded_error",
                                         submitted.message));
  CompletionId id{ids.next(), unixSeconds(), options.modelName};
  CompletionText text(tokenizer, params->stop);
  RequestStream &stream = *submitted.stream;

  if (!params->stream) {
    std::string whole;
    Outcome outcome =
        follow(stream, socket, text, usage, [&](const std::string &piece) {
          whole += piece;
          return true;
        });
    if (outcome.clientGone)
      return false;
    if (outcome.reason == FinishReason::Failed) {
      if (outcome.timedOut)
        return sendError(socket, request, http::status::service_unavailable,
                         "timeout_error", outcome.error);
      return stopping ? sendError(socket, request,
                                  http::status::service_unavailable,
                                  "overloaded_error", outcome.error)
                      : sendError(socket, request,
                                  http::status::internal_server_error,
                                  "server_error", outcome.error);
    }
    whole += text.finish();
    return sendJson(socket, request, http::status::ok,
                    completionJson(id, whole, outcome.reason, usage));
  }

  // Server-sent events: chunked over HTTP/1.1, to the close over HTTP/1.0.
  bool chunked = request.version() >= 11;
  http::response<http::empty_body> head{http::status::ok, request.version()};
  head.set(http::field::server, "llmc");
  head.set(http::field::content_type, "text/event-stream");
  head.set(http::field::cache_control, "no-cache");
  head.keep_alive(chunked && request.keep_alive());
  head.chunked(chunked);
  http::response_serializer<http::empty_body> serializer{head};
  beast::error_code ec;
  http::write_header(socket, serializer, ec);
  if (ec) {
    stream.cancel();
    return false;
  }
  auto send = [&](const std::string &event) {
    beast::error_code error;
    if (chunked)
      net::write(socket, http::make_chunk(net::buffer(event)), error);
    else
      net::write(socket, net::buffer(event), error);
    return !error;
  };
  Outcome outcome =
      follow(stream, socket, text, usage, [&](const std::string &piece) {
        return send(chunkEvent(id, piece));
      });
  if (outcome.clientGone)
    return false;
  bool sent =
      outcome.reason == FinishReason::Failed
          ? send("data: " + errorJson("server_error", outcome.error) + "\n\n")
          : send(chunkEvent(id, text.finish(), outcome.reason, usage));
  sent = sent && send("data: [DONE]\n\n");
  if (sent && chunked)
    net::write(socket, http::make_chunk_last(), ec);
  return sent && !ec && chunked && outcome.reason != FinishReason::Failed;
}

} // namespace

llvm::Error llmc::serve::serve(runtime::CachedGenerator &generator,
                               const TextCodec &tokenizer,
                               const ServeOptions &options) {
  if (tokenizer.vocabSize() > generator.vocab())
    return llvm::createStringError(llvm::formatv(
        "serve: the tokenizer ({0}) has {1} tokens, more than the model's "
        "vocabulary of {2}",
        tokenizer.describe(), tokenizer.vocabSize(), generator.vocab()));
  Server server(generator, tokenizer, options);
  return server.run();
}
