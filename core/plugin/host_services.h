/* host_services.h — the services table the core hands to plugins (plugin.h: lmp_host).
 *
 * Pass it with a run's context as (host, hctx) to a plugin; every service works on the context
 * it is given (base/ctx.h).  Declared here, where the loader (registry.c's probes, backend.c's
 * create) hands it to the plugins it opens; defined at the top of the core, in
 * services/host_services.c, because its entries run compression's block edits and training's
 * learning loops, which sit above the loader (docs/architecture.md, "Layering"). */
#ifndef LMP_CORE_HOST_SERVICES_H
#define LMP_CORE_HOST_SERVICES_H

#include "lmpress/plugin.h"

const lmp_host *lmp_host_services(void);

#endif
