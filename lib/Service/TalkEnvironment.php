<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCP\App\IAppManager;
use Psr\Container\ContainerInterface;
use Psr\Log\LoggerInterface;

/**
 * TalkEnvironment is everything the app asks of Talk (app id "spreed") beyond its public
 * events. Talk may be missing or disabled, and its internal classes carry no stability
 * promise, so every class is named as a string, checked with class_exists and used inside
 * try/catch; callers get null instead of an error.
 */
class TalkEnvironment {
	public const APP_ID = 'spreed';
	public const INSTALL_EVENT = 'OCA\Talk\Events\BotInstallEvent';
	public const INVOKE_EVENT = 'OCA\Talk\Events\BotInvokeEvent';
	private const MANAGER = 'OCA\Talk\Manager';
	private const PARTICIPANT_SERVICE = 'OCA\Talk\Service\ParticipantService';

	/** Conversation types of Talk's Room class (docs/constants.md). */
	public const TYPE_ONE_TO_ONE = 1;
	public const TYPE_NOTE_TO_SELF = 6;

	public function __construct(
		private readonly IAppManager $appManager,
		private readonly ContainerInterface $container,
		private readonly LoggerInterface $logger,
	) {
	}

	/** Whether Talk is enabled and new enough for in-process app bots (Talk 21+). */
	public function isAvailable(): bool {
		try {
			if (!$this->appManager->isInstalled(self::APP_ID)) {
				return false;
			}
		} catch (\Throwable $e) {
			$this->logger->warning('Could not ask whether Talk is enabled', ['exception' => $e]);
			return false;
		}
		return class_exists(self::INSTALL_EVENT) && class_exists(self::INVOKE_EVENT);
	}

	/** The installed Talk version, or '' when it cannot be told. */
	public function version(): string {
		try {
			return $this->appManager->getAppVersion(self::APP_ID);
		} catch (\Throwable) {
			return '';
		}
	}

	/**
	 * The conversation's type and number of users (guests excluded), through Talk's
	 * internal Manager and ParticipantService. Either is null when it cannot be had.
	 *
	 * @return array{type: ?int, user_count: ?int}
	 */
	public function describeConversation(string $token): array {
		$info = ['type' => null, 'user_count' => null];
		if ($token === '' || !class_exists(self::MANAGER)) {
			return $info;
		}
		try {
			$room = $this->container->get(self::MANAGER)->getRoomByToken($token);
			$info['type'] = (int)$room->getType();
		} catch (\Throwable $e) {
			$this->logger->debug('Talk conversation lookup failed', ['token' => $token, 'exception' => $e]);
			return $info;
		}
		if (!class_exists(self::PARTICIPANT_SERVICE)) {
			return $info;
		}
		try {
			$info['user_count'] = (int)$this->container->get(self::PARTICIPANT_SERVICE)->getNumberOfUsers($room);
		} catch (\Throwable $e) {
			$this->logger->debug('Talk user count failed', ['token' => $token, 'exception' => $e]);
		}
		return $info;
	}
}
