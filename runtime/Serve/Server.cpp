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

#include <atomic>
#include <chrono>
#include <ctime>
#include <random>
#include <set>
#include <thread>

using namespace llmc;
using namespace llmc::serve;

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

using Request = http::request<http::string_body>;

/// How often a connection waiting for tokens looks whether its client left.
constexpr std::chrono::milliseconds kPollInterval(50);

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
  /// A connection's thread: requests one after another (keep-alive).
  void connection(tcp::socket socket);
  /// Answers one request; false when the connection must close.
  bool respond(tcp::socket &socket, const Request &request);
  bool complete(tcp::socket &socket, const Request &request);
  bool sendJson(tcp::socket &socket, const Request &request,
                http::status status, std::string body,
                llvm::StringRef allow = "");
  bool sendError(tcp::socket &socket, const Request &request,
                 http::status status, llvm::StringRef type,
                 llvm::StringRef message, llvm::StringRef allow = "");

  /// The end of a completion as its connection saw it.
  struct Outcome {
    FinishReason reason = FinishReason::Length;
    std::string error;
    bool clientGone = false;
  };
  /// Reads `stream` until the request ends, passing each piece of final
  /// text to `emit` (false: the client is gone). Cancels the request when
  /// a stop string is found or the client leaves.
  Outcome follow(RequestStream &stream, tcp::socket &socket,
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

  // Open connections: their sockets, to wake them at shutdown.
  std::mutex connectionsMutex;
  std::condition_variable connectionsDone;
  std::set<int> connections;
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
  for (int fd : connections)
    ::shutdown(fd, SHUT_RD);
  if (!connectionsDone.wait_for(lock, std::chrono::seconds(5),
                                [&] { return connections.empty(); })) {
    for (int fd : connections)
      ::shutdown(fd, SHUT_RDWR);
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
    if (!error) {
      std::lock_guard<std::mutex> lock(connectionsMutex);
      if (int64_t(connections.size()) >= options.maxConnections) {
        std::string body =
            errorJson("overloaded_error",
                      llvm::formatv("too many open connections (the limit "
                                    "is {0})",
                                    options.maxConnections)
                          .str());
        http::response<http::string_body> response{
            http::status::service_unavailable, 11};
        response.set(http::field::content_type, "application/json");
        response.keep_alive(false);
        response.body() = std::move(body);
        response.prepare_payload();
        beast::error_code ec;
        http::write(socket, response, ec);
        lingeringClose(socket);
      } else {
        int fd = socket.native_handle();
        connections.insert(fd);
        try {
          std::thread(&Server::connection, this, std::move(socket)).detach();
        } catch (const std::system_error &) {
          connections.erase(fd);
          llvm::errs() << "llmc: serve: cannot start a connection thread\n";
        }
      }
    }
    accept();
  });
}

void Server::connection(tcp::socket socket) {
  int fd = socket.native_handle();
  beast::flat_buffer buffer;
  while (true) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(options.maxBodyBytes);
    parser.header_limit(16 * 1024);
    beast::error_code ec;
    http::read(socket, buffer, parser, ec);
    if (ec == http::error::end_of_stream || stopping)
      break;
    if (ec == http::error::body_limit || ec == http::error::header_limit) {
      bool body = ec == http::error::body_limit;
      Request request = parser.get();
      request.keep_alive(false);
      sendError(socket, request,
                body ? http::status::payload_too_large
                     : http::status::request_header_fields_too_large,
                "invalid_request_error",
                body ? llvm::formatv("the body is over the limit of {0} "
                                     "bytes",
                                     options.maxBodyBytes)
                           .str()
                     : "the request's header is over 16 KiB");
      lingeringClose(socket);
      break;
    }
    if (ec) {
      // A request that is not HTTP gets a 400; a broken connection nothing.
      if (ec.category() == http::make_error_code(http::error::bad_target)
                               .category()) {
        Request request;
        request.version(11);
        request.keep_alive(false);
        sendError(socket, request, http::status::bad_request,
                  "invalid_request_error",
                  "malformed HTTP request: " + ec.message());
        lingeringClose(socket);
      }
      break;
    }
    if (!respond(socket, parser.get()) || !parser.get().keep_alive())
      break;
  }
  beast::error_code ec;
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
  std::lock_guard<std::mutex> lock(connectionsMutex);
  connections.erase(fd);
  connectionsDone.notify_all();
}

bool Server::respond(tcp::socket &socket, const Request &request) {
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

bool Server::sendJson(tcp::socket &socket, const Request &request,
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

bool Server::sendError(tcp::socket &socket, const Request &request,
                       http::status status, llvm::StringRef type,
                       llvm::StringRef message, llvm::StringRef allow) {
  return sendJson(socket, request, status, errorJson(type, message), allow);
}

Server::Outcome
Server::follow(RequestStream &stream, tcp::socket &socket, CompletionText &text,
               Usage &usage,
               llvm::function_ref<bool(const std::string &)> emit) {
  while (true) {
    std::optional<RequestStream::Event> event = stream.next(kPollInterval);
    if (!event) {
      if (peerClosed(socket)) {
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

bool Server::complete(tcp::socket &socket, const Request &request) {
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
    if (outcome.reason == FinishReason::Failed)
      return stopping ? sendError(socket, request,
                                  http::status::service_unavailable,
                                  "overloaded_error", outcome.error)
                      : sendError(socket, request,
                                  http::status::internal_server_error,
                                  "server_error", outcome.error);
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
