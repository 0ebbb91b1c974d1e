<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\AppInfo\Application;
use OCA\Istota\Exception\SidecarException;
use OCA\Istota\Exception\SidecarRejectedException;
use OCA\Istota\Exception\SidecarUnavailableException;
use OCA\Istota\Exception\SidecarNotConfiguredException;
use OCP\ICacheFactory;
use OCP\IConfig;
use OCP\IUser;
use OCP\IUserManager;
use Psr\Log\LoggerInterface;

/**
 * HomeConversation gives every user who may use the bot a conversation with it that is
 * simply there: a Talk group conversation named after the bot whose only member is the
 * user (a private conversation to the sidecar, so every message is answered), with the
 * bot enabled, and a short welcome from the sidecar in it.
 *
 * The sidecar decides who may use the bot (docs/user-api.md, Access): it is asked first,
 * with the user's groups, and no conversation is made for a refused user; the sidecar
 * checks again when the conversation is reported. The token is kept as the user's
 * preference, so a conversation is made once: one the user deleted is not made again
 * behind their back.
 */
class HomeConversation {
	/** User preference (app istota): the token of the conversation made for the user. */
	public const PREF_TOKEN = 'home_conversation';

	public const CREATED = 'created';
	public const EXISTS = 'exists';
	public const DELETED = 'deleted_by_user';
	public const NOT_ALLOWED = 'not_allowed';
	public const SKIPPED = 'skipped';
	public const NO_TALK = 'no_talk';
	public const SIDECAR_DOWN = 'sidecar_unavailable';
	public const FAILED = 'failed';

	/** How long one user's lock lives when a run dies holding it. */
	private const LOCK_TTL = 60;

	public function __construct(
		private readonly IUserManager $users,
		private readonly IConfig $config,
		private readonly SessionService $sessions,
		private readonly SidecarClient $client,
		private readonly TalkEnvironment $talk,
		private readonly AppSettings $settings,
		private readonly ICacheFactory $cacheFactory,
		private readonly LoggerInterface $logger,
	) {
	}

	/**
	 * Makes sure $uid has their conversation with the bot, if they may use it. Returns one
	 * of the outcome constants; never throws for an ordinary refusal or outage.
	 */
	public function ensure(string $uid): string {
		$user = $this->users->get($uid);
		if (!$user instanceof IUser || !$user->isEnabled() || $uid === $this->settings->botUser()) {
			return self::SKIPPED;
		}
		if (!$this->talk->isAvailable()) {
			return self::NO_TALK;
		}
		try {
			if (!$this->sessions->open($uid, SidecarClient::DEFAULT_TIMEOUT, SidecarClient::DEFAULT_CONNECT_TIMEOUT)['allowed']) {
				return self::NOT_ALLOWED;
			}
		} catch (SidecarRejectedException $e) {
			return $e->getErrorCode() === 'not_allowed' ? self::NOT_ALLOWED : self::FAILED;
		} catch (SidecarUnavailableException|SidecarNotConfiguredException) {
			return self::SIDECAR_DOWN;
		} catch (SidecarException) {
			return self::FAILED;
		}

		$lock = $this->cacheFactory->isAvailable() ? $this->cacheFactory->createLocking('istota-home') : null;
		$lockKey = hash('sha256', $uid);
		if ($lock !== null && !$lock->add($lockKey, 1, self::LOCK_TTL)) {
			return self::SKIPPED; // another run is making it right now
		}
		try {
			return $this->ensureLocked($user);
		} finally {
			$lock?->remove($lockKey);
		}
	}

	/**
	 * ensure() for every enabled user (the bot account excepted), e.g. after setup or an
	 * access change. Stops asking once the sidecar is found down: every later user would
	 * wait for the same timeout.
	 *
	 * @return array<string, int> outcome => number of users
	 */
	public function ensureAll(): array {
		$counts = [];
		$down = false;
		$this->users->callForAllUsers(function (IUser $user) use (&$counts, &$down): void {
			if ($down) {
				$counts[self::SIDECAR_DOWN] = ($counts[self::SIDECAR_DOWN] ?? 0) + 1;
				return;
			}
			$outcome = $this->ensure($user->getUID());
			$down = $outcome === self::SIDECAR_DOWN || $outcome === self::NO_TALK;
			$counts[$outcome] = ($counts[$outcome] ?? 0) + 1;
		});
		ksort($counts);
		return $counts;
	}

	/** The token of the conversation made for $uid, or '' when none was. */
	public function tokenOf(string $uid): string {
		return (string)$this->config->getUserValue($uid, Application::APP_ID, self::PREF_TOKEN, '');
	}

	private function ensureLocked(IUser $user): string {
		$uid = $user->getUID();
		$token = $this->tokenOf($uid);
		$outcome = self::EXISTS;
		if ($token !== '' && !$this->talk->conversationExists($token)) {
			return self::DELETED;
		}
		try {
			if ($token === '') {
				$token = $this->talk->createPrivateConversation($user, $this->settings->botName());
				$this->config->setUserValue($uid, Application::APP_ID, self::PREF_TOKEN, $token);
				$outcome = self::CREATED;
			}
			// Enabled every time: harmless when it is, and it repairs a conversation whose
			// bot was removed by a half-done earlier run.
			$this->talk->enableBot($token, AppSettings::BOT_URL);
		} catch (\RuntimeException $e) {
			$this->logger->warning('Could not make the Istota conversation', ['user' => $uid, 'exception' => $e]);
			return self::FAILED;
		}
		try {
			$this->client->postJson(SidecarClient::userPath($uid, 'conversation'), ['token' => $token], SidecarClient::DEFAULT_TIMEOUT, SidecarClient::DEFAULT_CONNECT_TIMEOUT);
		} catch (SidecarRejectedException $e) {
			// Refused between the two calls (an access change): the conversation stays, as
			// one the user made would; the sidecar answers nothing in it.
			$this->logger->info('The sidecar refused the Istota conversation', ['user' => $uid, 'code' => $e->getErrorCode()]);
			return $e->getErrorCode() === 'not_allowed' ? self::NOT_ALLOWED : self::FAILED;
		} catch (SidecarException $e) {
			// Made but not reported: the next run reports it (the welcome is sent once).
			$this->logger->warning('Could not tell the sidecar about the Istota conversation', ['user' => $uid, 'exception' => $e]);
			return self::SIDECAR_DOWN;
		}
		return $outcome;
	}
}
