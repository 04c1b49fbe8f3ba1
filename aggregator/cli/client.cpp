#include "client.hpp"

#include <zmq.hpp>

namespace netprism::cli {

namespace {
zmq::context_t& context() {
  static zmq::context_t ctx(1);
  return ctx;
}
}  // namespace

std::optional<nlohmann::json> Client::call(const nlohmann::json& request, CallError& err) const {
  if (!security_.error.empty()) {
    err = {CallError::kOther, security_.error};
    return std::nullopt;
  }
  // A fresh REQ socket per call: REQ's strict send/recv lockstep would otherwise be stuck after a timeout.
  zmq::socket_t s(context(), zmq::socket_type::req);
  s.set(zmq::sockopt::linger, 0);  // never wait at exit for a message nobody will take
  s.set(zmq::sockopt::rcvtimeo, static_cast<int>(timeout_.count()));
  s.set(zmq::sockopt::sndtimeo, static_cast<int>(timeout_.count()));
  // Replies can be large (flows of a big cluster, dump pages) but are bounded: 1 GiB guards memory.
  s.set(zmq::sockopt::maxmsgsize, int64_t{1} << 30);
  // With CURVE, a wrong server key or a key the aggregator does not know fails the handshake: no reply,
  // reported as unreachable after the timeout (ZeroMQ does not tell the client why).
  keys::apply_client(s.handle(), security_.curve);
  try {
    s.connect(endpoint_);
  } catch (const zmq::error_t& e) {
    err = {CallError::kBadEndpoint, "invalid aggregator endpoint '" + endpoint_ + "': " + e.what()};
    return std::nullopt;
  }
  const std::string text = request.dump();
  const auto secs = std::to_string(timeout_.count() / 1000.0).substr(0, 4);
  try {
    if (!s.send(zmq::buffer(text), zmq::send_flags::none)) {
      err = {CallError::kUnreachable,
             "aggregator at " + endpoint_ + " is unreachable (could not send within " + secs + " s)"};
      return std::nullopt;
    }
    zmq::message_t reply;
    if (!s.recv(reply, zmq::recv_flags::none)) {
      err = {CallError::kUnreachable,
             "aggregator at " + endpoint_ + " is unreachable (no answer within " + secs + " s)"};
      return std::nullopt;
    }
    auto j = nlohmann::json::parse(reply.to_string_view(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      err = {CallError::kOther, "aggregator sent an invalid reply"};
      return std::nullopt;
    }
    if (j.value("ok", false) && j.contains("result")) return j["result"];
    err = {j.value("not_found", false) ? CallError::kNotFound : CallError::kOther,
           j.value("error", std::string("aggregator reported an error"))};
    return std::nullopt;
  } catch (const zmq::error_t& e) {
    err = {CallError::kUnreachable, "aggregator at " + endpoint_ + ": " + e.what()};
    return std::nullopt;
  }
}

}  // namespace netprism::cli
