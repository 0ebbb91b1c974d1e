<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Db\OutboxMapper;
use OCA\Istota\Exception\SidecarException;
use OCA\Istota\Exception\SidecarRejectedException;

/**
 * SelfTest walks every hop between Nextcloud and the sidecar and reports one result
 * per hop: configuration, reachability, the signed round trip, Talk, and the outbox.
 */
class SelfTest {
	/** Shorter secrets are refused by the sidecar's config validation. */
	private const MIN_SECRET_LENGTH = 32;

	public function __construct(
		private readonly AppSettings $settings,
		private readonly SidecarClient $client,
		private readonly TalkEnvironment $talk,
		private readonly OutboxMapper $outbox,
	) {
	}

	/** @return list<CheckResult> */
	public function run(): array {
		return [
			$this->configuration(),
			$this->reachability(),
			$this->roundTrip(),
			$this->talkBot(),
			$this->outboxDepth(),
		];
	}

	private function configuration(): CheckResult {
		$name = 'configuration';
		$url = $this->settings->sidecarUrl();
		$parts = parse_url($url);
		if (!is_array($parts) || !in_array(strtolower((string)($parts['scheme'] ?? '')), ['http', 'https'], true) || (string)($parts['host'] ?? '') === '') {
			return new CheckResult($name, false, sprintf('sidecar_url "%s" is not an http(s) URL; run occ istota:setup --sidecar-url=…', $url));
		}
		$secret = $this->settings->sharedSecret();
		if ($secret === '') {
			return new CheckResult($name, false, 'no shared secret yet; run occ istota:setup');
		}
		if (strlen($secret) < self::MIN_SECRET_LENGTH) {
			return new CheckResult($name, false, sprintf('the shared secret is shorter than %d characters; delete it and run occ istota:setup', self::MIN_SECRET_LENGTH));
		}
		return new CheckResult($name, true, sprintf('sidecar URL %s, shared secret set', $url));
	}

	private function reachability(): CheckResult {
		$name = 'sidecar reachable';
		try {
			$health = $this->client->health();
		} catch (SidecarException $e) {
			return new CheckResult($name, false, $e->getMessage());
		}
		if (($health['status'] ?? null) !== 'ok') {
			return new CheckResult($name, false, sprintf('GET %s answered without "status":"ok"', SidecarClient::PATH_HEALTH));
		}
		return new CheckResult($name, true, sprintf('%s answers, version %s, schema %s', $this->settings->sidecarUrl(), self::scalar($health['version'] ?? null), self::scalar($health['schema'] ?? null)));
	}

	private function roundTrip(): CheckResult {
		$name = 'signed round trip';
		$echo = bin2hex(random_bytes(8));
		try {
			$pong = $this->client->ping($echo);
		} catch (SidecarRejectedException $e) {
			$hint = $e->getHttpStatus() === 401
				? ' (the sidecar holds another shared secret or its clock is off; rerun occ istota:setup, install its config and restart the sidecar)'
				: '';
			return new CheckResult($name, false, $e->getMessage() . $hint);
		} catch (SidecarException $e) {
			return new CheckResult($name, false, $e->getMessage());
		}
		if (($pong['pong'] ?? null) !== $echo) {
			return new CheckResult($name, false, sprintf('POST %s did not echo the nonce back', SidecarClient::PATH_PING));
		}
		return new CheckResult($name, true, sprintf('POST %s signed and echoed', SidecarClient::PATH_PING));
	}

	private function talkBot(): CheckResult {
		$name = 'Talk bot';
		if (!$this->talk->isAvailable()) {
			return new CheckResult($name, false, 'Talk (spreed 21 or newer) is not enabled');
		}
		if ($this->settings->botSecret() === '') {
			return new CheckResult($name, false, 'no bot secret yet; run occ istota:setup');
		}
		$version = $this->talk->version();
		return new CheckResult($name, true, sprintf('Talk %s, bot "%s" (%s), bot secret set', $version === '' ? '(version unknown)' : $version, $this->settings->botName(), AppSettings::BOT_URL));
	}

	private function outboxDepth(): CheckResult {
		$name = 'outbox';
		try {
			$depth = $this->outbox->count();
			$head = $depth > 0 ? $this->outbox->head(1) : [];
		} catch (\Throwable $e) {
			return new CheckResult($name, false, 'cannot read the outbox table: ' . $e->getMessage());
		}
		if ($depth === 0) {
			return new CheckResult($name, true, 'empty, every Talk event was delivered');
		}
		$detail = sprintf('%d Talk event(s) waiting for the sidecar', $depth);
		if ($head !== []) {
			$detail .= sprintf(', oldest from %s after %d attempt(s)', gmdate('Y-m-d H:i:s', $head[0]->createdAt) . ' UTC', $head[0]->attempts);
			if ($head[0]->lastError !== '') {
				$detail .= ', last error: ' . $head[0]->lastError;
			}
		}
		return new CheckResult($name, false, $detail);
	}

	private static function scalar(mixed $value): string {
		return is_scalar($value) ? (string)$value : '?';
	}
}
