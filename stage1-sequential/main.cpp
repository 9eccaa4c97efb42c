// Stage 1: the sequential proxy. One loop accepts a client, serves its whole transaction, and
// only then accepts the next. Simple and correct — and one slow origin stalls every client
// behind it, which is exactly what the next stage fixes.
#include "server/server.h"

int main(int argc, char** argv) {
  proxy::StageDefinition stage;
  stage.name = "stage1-sequential";
  stage.description =
      "stage1-sequential: a caching HTTP forward proxy that serves one client at a time";
  auto [server, exit_code] = proxy::start_stage(argc, argv, stage);
  if (!server) return exit_code;
  while (std::optional<proxy::Socket> client = server->accept()) {
    server->serve(std::move(*client));
  }
  return server->finish();
}
