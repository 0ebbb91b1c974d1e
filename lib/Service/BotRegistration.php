<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCP\EventDispatcher\IEventDispatcher;

/**
 * BotRegistration makes Talk know the Istota bot, by dispatching Talk's BotInstallEvent
 * with our URL, name, the bot secret and features event|response|reaction.
 *
 * It is safe to repeat (repair steps run on every enable): the secret is created once
 * and never replaced, and Talk treats the same URL with the same secret as an update of
 * name and description only (talk-bots.md §2.2, §12).
 */
class BotRegistration {
	public const DESCRIPTION = 'Istota, your assistant: it answers everything in your private conversation with it; elsewhere mention @%s or start a message with "!". "!help" lists the commands.';

	public function __construct(
		private readonly AppSettings $settings,
		private readonly TalkEnvironment $talk,
		private readonly IEventDispatcher $dispatcher,
	) {
	}

	public function register(): BotRegistrationResult {
		// Created even without Talk, so a later registration uses the same secret as the
		// sidecar config written in the meantime.
		$secret = $this->settings->ensureBotSecret();
		if (!$this->talk->isAvailable()) {
			return new BotRegistrationResult(false, 'Talk (spreed, version 21 or newer) is not enabled, so the Istota bot was not registered. Enable Talk, then run "occ istota:setup" or disable and enable Istota.');
		}
		$name = $this->settings->botName();
		$class = TalkEnvironment::INSTALL_EVENT;
		try {
			$event = new $class($name, $secret, AppSettings::BOT_URL, sprintf(self::DESCRIPTION, $name), features: AppSettings::BOT_FEATURES);
			$this->dispatcher->dispatchTyped($event);
		} catch (\Throwable $e) {
			// Talk validates in its listener and throws InvalidArgumentException; its messages
			// do not contain the secret, but make sure of it before showing them.
			$reason = str_replace($secret, '***', $e->getMessage());
			return new BotRegistrationResult(false, sprintf('Talk did not register the Istota bot: %s', $reason));
		}
		return new BotRegistrationResult(true, sprintf('The Istota bot "%s" is registered with Talk (%s).', $name, AppSettings::BOT_URL));
	}
}
