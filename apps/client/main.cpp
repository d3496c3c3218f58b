// esptun-client: the VPN client (one peer, optional route_all and kill_switch).
#include "apps/cli/cli.hpp"

int main(int argc, char** argv) { return esptun::cli::cli_main(esptun::conf::Role::client, argc, argv); }
