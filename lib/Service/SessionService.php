<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Exception\InvalidInputException;
use OCA\Istota\Exception\SidecarException;
use OCA\Istota\Exception\SidecarRejectedException;
use OCP\ICache;
use OCP\ICacheFactory;
use OCP\IUser;
use OCP\IUserManager;

/**
 * SessionService tells the sidecar who a user is (POST /v1/users/{uid}/session with the
 * UserProfile) and learns whether that user may use the bot (docs/user-api.md). The
 * sidecar decides access; the app only asks.
 *
 * Answers are kept for the rest of the request and for CACHE_TTL seconds in Nextcloud's
 * distributed cache, so a Talk listener that needs the answer for every shared file does
 * not add a sidecar round trip to each message.
 */
class SessionService {
	public const CACHE_TTL = 60;
	private const CACHE_PREFIX = 'istota-session';

	/** @var array<string, array{allowed: bool, istota_admin: bool, bot_name: string, files_path: string}> uid => answer, this request only */
	private array $answers = [];
	private ?ICache $cache = null;

	public function __construct(
		private readonly IUserManager $userManager,
		private readonly UserProfile $profiles,
		private readonly SidecarClient $client,
		private readonly AppSettings $settings,
		private readonly ICacheFactory $cacheFactory,
	) {
	}

	/**
	 * Sends the user's profile to the sidecar and returns its answer (always a fresh call;
	 * the answer is cached for mayUse()).
	 *
	 * @return array{allowed: bool, istota_admin: bool, bot_name: string, files_path: string}
	 * @throws SidecarException
	 */
	public function open(string $uid, float $timeout = SidecarClient::PAGE_TIMEOUT, ?float $connectTimeout = null): array {
		$user = $this->userManager->get($uid);
		if (!$user instanceof IUser) {
			throw new InvalidInputException('unknown user');
		}
		$answer = self::normalise($this->client->postJson(SidecarClient::userPath($uid, 'session'), $this->profiles->of($user), $timeout, $connectTimeout));
		$this->answers[$uid] = $answer;
		$this->cache()->set(self::cacheKey($uid), $answer, self::CACHE_TTL);
		return $answer;
	}

	/**
	 * Makes sure the sidecar heard of this user lately: a session call unless one was made
	 * (or cached) within CACHE_TTL seconds. Pages call it before reading the user's status,
	 * which the sidecar only has for users it knows.
	 *
	 * @throws SidecarException
	 */
	public function ensure(string $uid): void {
		if (isset($this->answers[$uid])) {
			return;
		}
		$cached = $this->cache()->get(self::cacheKey($uid));
		if (is_array($cached) && is_bool($cached['allowed'] ?? null)) {
			$this->answers[$uid] = self::normalise($cached);
			return;
		}
		$this->open($uid);
	}

	/**
	 * Whether the sidecar lets this user use the bot: true or false, or null when that
	 * cannot be known now (sidecar down, not set up, refusing our signature). The call is
	 * bounded by the Talk listener's timeouts, since it runs inside the sender's request.
	 */
	public function mayUse(string $uid): ?bool {
		if (isset($this->answers[$uid])) {
			return $this->answers[$uid]['allowed'];
		}
		$cached = $this->cache()->get(self::cacheKey($uid));
		if (is_array($cached) && is_bool($cached['allowed'] ?? null)) {
			$this->answers[$uid] = self::normalise($cached);
			return $cached['allowed'];
		}
		try {
			return $this->open($uid, $this->settings->forwardTimeoutMs() / 1000, $this->settings->connectTimeoutMs() / 1000)['allowed'];
		} catch (SidecarRejectedException $e) {
			return $e->getErrorCode() === 'not_allowed' ? false : null;
		} catch (SidecarException|InvalidInputException) {
			return null;
		}
	}

	/**
	 * Only the fields of the contract, with their types: nothing else the sidecar might add
	 * reaches the browser.
	 *
	 * @param array<string, mixed> $answer
	 * @return array{allowed: bool, istota_admin: bool, bot_name: string, files_path: string}
	 */
	private static function normalise(array $answer): array {
		return [
			'allowed' => ($answer['allowed'] ?? false) === true,
			'istota_admin' => ($answer['istota_admin'] ?? false) === true,
			'bot_name' => is_string($answer['bot_name'] ?? null) ? $answer['bot_name'] : '',
			'files_path' => is_string($answer['files_path'] ?? null) ? $answer['files_path'] : '',
		];
	}

	private function cache(): ICache {
		return $this->cache ??= $this->cacheFactory->createDistributed(self::CACHE_PREFIX);
	}

	private static function cacheKey(string $uid): string {
		return hash('sha256', $uid);
	}
}
