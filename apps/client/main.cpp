// esptun-client: the VPN client (one peer, optional route_all).
#include "apps/cli/cli.hpp"

int main(int argc, char** argv) { return esptun::cli::cli_main(esptun::conf::Role::client, argc, argv); }
