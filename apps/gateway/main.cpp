// esptun-gateway: the site-to-site gateway service (any number of peers).
#include "apps/cli/cli.hpp"

int main(int argc, char** argv) { return esptun::cli::cli_main(esptun::conf::Role::gateway, argc, argv); }
